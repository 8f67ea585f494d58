//===- RouterLossesTest.cpp - The sequence-wise loss and the z-loss -------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

/// DeepSeek-V3's sequence-wise loss written out from its paper (eqs. 17-20)
/// in double, over B sequences of S tokens: the mean of sum_e f_e P_e.
double naiveSequenceAuxLoss(const std::vector<float> &probs,
                            const std::vector<int32_t> &indices, int64_t B,
                            int64_t S, int64_t E, int64_t K) {
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> f(E, 0.0), P(E, 0.0);
    for (int64_t s = 0; s < S; ++s) {
      int64_t t = b * S + s;
      double z = 1e-20;
      for (int64_t e = 0; e < E; ++e)
        z += probs[t * E + e];
      for (int64_t e = 0; e < E; ++e)
        P[e] += probs[t * E + e] / z / static_cast<double>(S);
      for (int64_t j = 0; j < K; ++j)
        if (int32_t e = indices[t * K + j]; e >= 0)
          f[e] += static_cast<double>(E) / static_cast<double>(K * S);
    }
    for (int64_t e = 0; e < E; ++e)
      total += f[e] * P[e];
  }
  return total / static_cast<double>(B);
}

/// Sigmoid-like scores in (0, 1) and a selection that is not their top-k
/// (the router's bias may pick any), with one dropped slot.
struct SequenceCase {
  int64_t B = 3, S = 4, E = 5, K = 2;
  std::vector<float> probs = randomVector(B * S * E, 7, 0.05f, 0.95f);
  std::vector<int32_t> indices;
  SequenceCase() {
    for (int64_t t = 0; t < B * S; ++t) {
      indices.push_back(static_cast<int32_t>((t * 3) % E));
      indices.push_back(static_cast<int32_t>((t * 3 + 1 + t % 2) % E));
    }
    indices[5] = -1;
  }
  float loss() const {
    SequenceAuxStatistics stats =
        sequenceAuxStatistics(probs.data(), indices.data(), B, S, E, K);
    return static_cast<float>(sequenceAuxLossSum(stats) / B);
  }
};

TEST(SequenceAuxLossTest, MatchesThePaper) {
  SequenceCase c;
  EXPECT_NEAR(c.loss(),
              naiveSequenceAuxLoss(c.probs, c.indices, c.B, c.S, c.E, c.K),
              1e-6);
}

TEST(SequenceAuxLossTest, BalancedUniformIsOne) {
  // Every expert gets K*S/E slots of every sequence, every score is equal:
  // f_e = 1 and P_e = 1/E, so the loss is 1 whatever the scale of scores.
  const int64_t B = 2, S = 4, E = 4, K = 2;
  std::vector<float> probs(B * S * E, 0.3f);
  std::vector<int32_t> indices;
  for (int64_t t = 0; t < B * S; ++t) {
    indices.push_back(static_cast<int32_t>((2 * t) % E));
    indices.push_back(static_cast<int32_t>((2 * t + 1) % E));
  }
  SequenceAuxStatistics stats =
      sequenceAuxStatistics(probs.data(), indices.data(), B, S, E, K);
  EXPECT_NEAR(sequenceAuxLossSum(stats) / B, 1.0, 1e-6);
}

TEST(SequenceAuxLossTest, CountsPerSequenceNotPerBatch) {
  // Two sequences, each sending all its tokens to one expert, but not the
  // same one: over the batch the load is balanced, per sequence it is not.
  const int64_t B = 2, S = 2, E = 2, K = 1;
  std::vector<float> probs = {0.9f, 0.1f, 0.9f, 0.1f, //
                              0.1f, 0.9f, 0.1f, 0.9f};
  std::vector<int32_t> indices = {0, 0, 1, 1};
  SequenceAuxStatistics stats =
      sequenceAuxStatistics(probs.data(), indices.data(), B, S, E, K);
  // f = (2, 0) and P = (0.9, 0.1) per sequence: 1.8 (the batch's would be 1).
  EXPECT_NEAR(sequenceAuxLossSum(stats) / B, 1.8, 1e-6);
}

TEST(SequenceAuxLossTest, BackwardMatchesFiniteDifferences) {
  SequenceCase c;
  const float dloss = 0.7f;
  std::vector<float> dprobs(c.probs.size());
  SequenceAuxStatistics stats = sequenceAuxStatistics(
      c.probs.data(), c.indices.data(), c.B, c.S, c.E, c.K);
  sequenceAuxLossBackward(dloss, c.B, stats, c.probs.data(), dprobs.data(),
                          c.B * c.S);
  auto loss = [&] { return dloss * static_cast<double>(c.loss()); };
  GradCheckOptions options;
  options.step = 1e-3f;
  options.absTol = 1e-4;
  EXPECT_GRADIENT("dprobs", c.probs, dprobs, loss, options);
}

TEST(SequenceAuxLossTest, SplitSequencesComposeToTheWhole) {
  // Each sequence's tokens split in two halves (sequence parallelism): the
  // halves' statistics add up to the whole sequences', and the backward of
  // each half from the summed statistics is the whole backward's rows.
  SequenceCase c;
  int64_t half = c.S / 2;
  auto slice = [&](auto &v, int64_t width, int64_t first) {
    std::decay_t<decltype(v)> part;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t s = first; s < first + half; ++s)
        for (int64_t i = 0; i < width; ++i)
          part.push_back(v[(b * c.S + s) * width + i]);
    return part;
  };
  std::vector<float> p0 = slice(c.probs, c.E, 0),
                     p1 = slice(c.probs, c.E, half);
  std::vector<int32_t> i0 = slice(c.indices, c.K, 0),
                       i1 = slice(c.indices, c.K, half);
  SequenceAuxStatistics s0 =
      sequenceAuxStatistics(p0.data(), i0.data(), c.B, half, c.E, c.K);
  SequenceAuxStatistics s1 =
      sequenceAuxStatistics(p1.data(), i1.data(), c.B, half, c.E, c.K);
  SequenceAuxStatistics sum = s0;
  sum.tokensPerSequence += s1.tokensPerSequence;
  for (size_t i = 0; i < sum.count.size(); ++i) {
    sum.count[i] += s1.count[i];
    sum.scoreSum[i] += s1.scoreSum[i];
  }
  EXPECT_NEAR(sequenceAuxLossSum(sum) / c.B, c.loss(), 1e-6);

  std::vector<float> whole(c.probs.size()), d0(p0.size()), d1(p1.size());
  SequenceAuxStatistics all = sequenceAuxStatistics(
      c.probs.data(), c.indices.data(), c.B, c.S, c.E, c.K);
  sequenceAuxLossBackward(0.3f, c.B, all, c.probs.data(), whole.data(),
                          c.B * c.S);
  sequenceAuxLossBackward(0.3f, c.B, sum, p0.data(), d0.data(), c.B * half);
  sequenceAuxLossBackward(0.3f, c.B, sum, p1.data(), d1.data(), c.B * half);
  std::vector<float> w0 = slice(whole, c.E, 0), w1 = slice(whole, c.E, half);
  for (size_t i = 0; i < d0.size(); ++i) {
    EXPECT_NEAR(d0[i], w0[i], 1e-7) << i;
    EXPECT_NEAR(d1[i], w1[i], 1e-7) << i;
  }
}

TEST(SequenceAuxLossTest, NoTokensGivesZero) {
  SequenceAuxStatistics empty =
      sequenceAuxStatistics(nullptr, nullptr, 2, 0, 4, 2);
  EXPECT_EQ(sequenceAuxLossSum(empty), 0.0);
}

TEST(ZLossTest, MatchesNaiveAndIsStable) {
  const int64_t T = 6, E = 5;
  auto logits = randomVector(T * E, 11, -4.0f, 4.0f);
  double want = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    double z = 0.0;
    for (int64_t e = 0; e < E; ++e)
      z += std::exp(static_cast<double>(logits[t * E + e]));
    want += std::log(z) * std::log(z);
  }
  ZLossSums sums = zLossSums(logits.data(), T, E);
  EXPECT_EQ(sums.count, T);
  EXPECT_NEAR(sums.sum / T, want / T, 1e-9);
  // exp(1e3) overflows; the max-subtracted form gives (1e3 + log 2)^2.
  std::vector<float> large = {1e3f, 1e3f};
  double lse = 1e3 + std::log(2.0);
  EXPECT_NEAR(zLossSums(large.data(), 1, 2).sum, lse * lse, 1e-6);
}

TEST(ZLossTest, BackwardMatchesFiniteDifferences) {
  const int64_t T = 4, E = 6;
  auto logits = randomVector(T * E, 13, -2.0f, 2.0f);
  const float dloss = 1.3f;
  std::vector<float> dlogits(T * E);
  zLossBackward(dloss, logits.data(), dlogits.data(), T, E, T);
  auto loss = [&] {
    ZLossSums sums = zLossSums(logits.data(), T, E);
    return dloss * sums.sum / static_cast<double>(sums.count);
  };
  GradCheckOptions options;
  options.step = 1e-3f;
  options.absTol = 1e-4;
  EXPECT_GRADIENT("dlogits", logits, dlogits, loss, options);
}

TEST(ZLossTest, BackwardDividesByTheGlobalCount) {
  // A rank holding 2 of 8 tokens: its rows are the 8-token mean's.
  const int64_t T = 2, E = 3;
  auto logits = randomVector(T * E, 17);
  std::vector<float> local(T * E), scaled(T * E);
  zLossBackward(1.0f, logits.data(), local.data(), T, E, 8);
  zLossBackward(1.0f, logits.data(), scaled.data(), T, E, T);
  for (int64_t i = 0; i < T * E; ++i)
    EXPECT_NEAR(local[i], scaled[i] * T / 8.0f, 1e-7) << i;
}

} // namespace
