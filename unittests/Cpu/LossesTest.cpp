//===- LossesTest.cpp - Tests of cross-entropy and the aux loss -----------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

TEST(CrossEntropyTest, ForwardMatchesNaiveAndIgnoresNegativeTargets) {
  const int64_t T = 5, V = 7;
  auto logits = randomVector(T * V, 101, -3.0f, 3.0f);
  std::vector<int32_t> targets = {3, -1, 0, 6, -100};
  double sum = 0.0;
  int n = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (targets[t] < 0)
      continue;
    double z = 0.0;
    for (int64_t v = 0; v < V; ++v)
      z += std::exp(static_cast<double>(logits[t * V + v]));
    sum += std::log(z) - logits[t * V + targets[t]];
    ++n;
  }
  EXPECT_NEAR(crossEntropyForward(logits.data(), targets.data(), T, V),
              sum / n, 1e-6);
}

TEST(CrossEntropyTest, StableForLargeLogits) {
  // exp(1e4) overflows; the max-subtracted form gives log(2) exactly here.
  std::vector<float> logits = {1e4f, 1e4f, -1e4f};
  std::vector<int32_t> targets = {1};
  EXPECT_NEAR(crossEntropyForward(logits.data(), targets.data(), 1, 3),
              std::log(2.0), 1e-6);
  std::vector<float> dlogits(3);
  crossEntropyBackward(1.0f, logits.data(), targets.data(), dlogits.data(), 1,
                       3);
  EXPECT_NEAR(dlogits[0], 0.5f, 1e-6);
  EXPECT_NEAR(dlogits[1], -0.5f, 1e-6);
  EXPECT_EQ(dlogits[2], 0.0f);
}

TEST(CrossEntropyTest, NoValidTargetGivesZero) {
  std::vector<float> logits = randomVector(6, 102);
  std::vector<int32_t> targets = {-1, -100};
  EXPECT_EQ(crossEntropyForward(logits.data(), targets.data(), 2, 3), 0.0f);
  std::vector<float> dlogits(6, 3.0f);
  crossEntropyBackward(1.0f, logits.data(), targets.data(), dlogits.data(), 2,
                       3);
  for (float g : dlogits)
    EXPECT_EQ(g, 0.0f);
}

TEST(CrossEntropyTest, BackwardMatchesFiniteDifferences) {
  const int64_t T = 4, V = 6;
  auto logits = randomVector(T * V, 103, -2.0f, 2.0f);
  std::vector<int32_t> targets = {2, -1, 5, 0};
  const float dloss = 1.7f;
  std::vector<float> dlogits(T * V);
  crossEntropyBackward(dloss, logits.data(), targets.data(), dlogits.data(), T,
                       V);
  for (int64_t v = 0; v < V; ++v)
    EXPECT_EQ(dlogits[1 * V + v], 0.0f); // ignored row
  auto loss = [&] {
    return dloss * static_cast<double>(
                       crossEntropyForward(logits.data(), targets.data(), T, V));
  };
  GradCheckOptions options;
  options.absTol = 1e-4;
  EXPECT_GRADIENT("dlogits", logits, dlogits, loss, options);
}

TEST(AuxLossTest, HandComputed) {
  // Top-1: token 0 -> 0, token 1 -> 1; count = [1, 1], P = [0.55, 0.45];
  // aux = 2 * (0.5 * 0.55 + 0.5 * 0.45) = 1.
  std::vector<float> balanced = {0.7f, 0.3f, 0.4f, 0.6f};
  EXPECT_NEAR(auxLossForward(balanced.data(), 2, 2, 1), 1.0, 1e-6);
  // Both pick expert 0: count = [2, 0], P = [0.65, 0.35]; aux = 2 * 0.65.
  std::vector<float> skewed = {0.7f, 0.3f, 0.6f, 0.4f};
  EXPECT_NEAR(auxLossForward(skewed.data(), 2, 2, 1), 1.3, 1e-6);
  // A tie selects the lower id, as the router does: count = [2, 0].
  std::vector<float> tied = {0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_NEAR(auxLossForward(tied.data(), 2, 2, 1), 1.0, 1e-6);
  std::vector<float> dprobs(4);
  auxLossBackward(1.0f, tied.data(), dprobs.data(), 2, 2, 1);
  EXPECT_EQ(dprobs, (std::vector<float>{1.0f, 0.0f, 1.0f, 0.0f}));
}

TEST(AuxLossTest, TopTwoCountsBothSlots) {
  // E = 3, k = 2: t0 picks (2, 0), t1 picks (1, 2): count = [1, 1, 2].
  std::vector<float> p = {0.3f, 0.1f, 0.6f, 0.1f, 0.5f, 0.4f};
  double P[3] = {0.2, 0.3, 0.5};
  double want = 3.0 * (0.5 * P[0] + 0.5 * P[1] + 1.0 * P[2]);
  EXPECT_NEAR(auxLossForward(p.data(), 2, 3, 2), want, 1e-6);
}

TEST(AuxLossTest, BackwardMatchesFiniteDifferences) {
  const int64_t T = 5, E = 4, K = 2;
  // Well separated probabilities so that a step cannot change the top-k.
  std::vector<float> probs = {0.1f, 0.4f, 0.2f, 0.3f, //
                              0.5f, 0.1f, 0.3f, 0.1f, //
                              0.25f, 0.15f, 0.5f, 0.1f, //
                              0.05f, 0.15f, 0.3f, 0.5f, //
                              0.6f, 0.25f, 0.1f, 0.05f};
  const float dloss = 0.8f;
  std::vector<float> dprobs(T * E);
  auxLossBackward(dloss, probs.data(), dprobs.data(), T, E, K);
  auto loss = [&] {
    return dloss * static_cast<double>(auxLossForward(probs.data(), T, E, K));
  };
  GradCheckOptions options;
  options.step = 1e-3f;
  options.absTol = 1e-4;
  EXPECT_GRADIENT("dprobs", probs, dprobs, loss, options);
}

//===----------------------------------------------------------------------===//
// Tokens split over ranks: sums, counts and statistics per part
//===----------------------------------------------------------------------===//

TEST(SplitLossesTest, CrossEntropySumsComposeToTheMean) {
  const int64_t T = 6, V = 5;
  auto logits = randomVector(T * V, 104, -3.0f, 3.0f);
  std::vector<int32_t> targets = {1, -100, 4, 0, 9, 2}; // 9 >= V: skipped
  CrossEntropySums whole =
      crossEntropySums(logits.data(), targets.data(), T, V);
  EXPECT_EQ(whole.count, 4);
  EXPECT_EQ(whole.count, crossEntropyCount(targets.data(), T, V));
  // On one rank the parts are the forward, bit for bit.
  EXPECT_EQ(crossEntropyMean(whole),
            crossEntropyForward(logits.data(), targets.data(), T, V));
  // Two ranks of three rows each: their sums add up to the whole's.
  CrossEntropySums first =
      crossEntropySums(logits.data(), targets.data(), 3, V);
  CrossEntropySums second =
      crossEntropySums(logits.data() + 3 * V, targets.data() + 3, 3, V);
  EXPECT_EQ(first.count + second.count, whole.count);
  EXPECT_NEAR(first.sum + second.sum, whole.sum, 1e-12);
  EXPECT_EQ(crossEntropyMean({0.0, 0}), 0.0f);
}

TEST(SplitLossesTest, CrossEntropyBackwardWithTheGlobalCount) {
  const int64_t T = 6, V = 5;
  auto logits = randomVector(T * V, 105, -3.0f, 3.0f);
  std::vector<int32_t> targets = {1, -1, 4, 0, 3, 2};
  std::vector<float> whole(T * V), split(T * V, 7.0f);
  crossEntropyBackward(0.9f, logits.data(), targets.data(), whole.data(), T, V);
  // Each half with the count of all rows gives the whole's rows exactly.
  int64_t count = crossEntropyCount(targets.data(), T, V);
  crossEntropyBackward(0.9f, logits.data(), targets.data(), split.data(), 3, V,
                       count);
  crossEntropyBackward(0.9f, logits.data() + 3 * V, targets.data() + 3,
                       split.data() + 3 * V, 3, V, count);
  EXPECT_EQ(split, whole);
  // No counted target anywhere: all zeros.
  std::vector<float> none(T * V, 7.0f);
  crossEntropyBackward(0.9f, logits.data(), targets.data(), none.data(), T, V,
                       0);
  for (float g : none)
    EXPECT_EQ(g, 0.0f);
}

TEST(SplitLossesTest, AuxLossStatisticsComposeToTheLoss) {
  const int64_t T = 6, E = 4, K = 2;
  auto probs = randomVector(T * E, 106, 0.0f, 1.0f);
  AuxLossStatistics whole = auxLossStatistics(probs.data(), T, E, K);
  EXPECT_EQ(whole.tokens, T);
  EXPECT_EQ(auxLossFromStatistics(whole),
            auxLossForward(probs.data(), T, E, K));
  AuxLossStatistics first = auxLossStatistics(probs.data(), 2, E, K);
  AuxLossStatistics second = auxLossStatistics(probs.data() + 2 * E, 4, E, K);
  AuxLossStatistics sum = first;
  sum.tokens += second.tokens;
  for (int64_t e = 0; e < E; ++e) {
    sum.count[e] += second.count[e];
    sum.probSum[e] += second.probSum[e];
    EXPECT_EQ(sum.count[e], whole.count[e]) << e;
    EXPECT_NEAR(sum.probSum[e], whole.probSum[e], 1e-12) << e;
  }
  EXPECT_EQ(sum.tokens, whole.tokens);
  EXPECT_NEAR(auxLossFromStatistics(sum), auxLossFromStatistics(whole), 1e-6);
  EXPECT_EQ(auxLossFromStatistics(AuxLossStatistics{{0, 0}, {0.0, 0.0}, 0}),
            0.0f);
}

TEST(SplitLossesTest, AuxLossBackwardFromGlobalStatistics) {
  const int64_t T = 6, E = 4, K = 2;
  auto probs = randomVector(T * E, 107, 0.0f, 1.0f);
  std::vector<float> whole(T * E), split(T * E, 7.0f);
  auxLossBackward(0.3f, probs.data(), whole.data(), T, E, K);
  // Counts and the token count are integers: every rank that sums them
  // gets the whole's gradient rows exactly.
  AuxLossStatistics global = auxLossStatistics(probs.data(), T, E, K);
  auxLossBackward(0.3f, global, split.data(), 2);
  auxLossBackward(0.3f, global, split.data() + 2 * E, 4);
  EXPECT_EQ(split, whole);
  // Without tokens nothing is written.
  std::vector<float> untouched(E, 7.0f);
  auxLossBackward(0.3f,
                  AuxLossStatistics{std::vector<int64_t>(E, 0),
                                    std::vector<double>(E, 0.0), 0},
                  untouched.data(), 1);
  EXPECT_EQ(untouched, std::vector<float>(E, 7.0f));
}

} // namespace
