//===- RouterTest.cpp - Tests of the top-k softmax router -----------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

struct RouterOut {
  std::vector<float> probs, weights;
  std::vector<int32_t> indices;
};

RouterOut route(const std::vector<float> &logits, int64_t T, int64_t E,
                int64_t topK, float cf = 0.0f) {
  RouterOut r{std::vector<float>(T * E), std::vector<float>(T * topK),
              std::vector<int32_t>(T * topK)};
  routerForward(logits.data(), r.probs.data(), r.weights.data(),
                r.indices.data(), T, E, topK, cf);
  return r;
}

/// Logits whose sorted values are at least 0.5 apart, so that a
/// finite-difference step can never reorder the top-k.
std::vector<float> separatedLogits(int64_t T, int64_t E, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> jitter(-0.1f, 0.1f);
  std::vector<float> logits(T * E);
  std::vector<int> order(E);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), gen);
    for (int64_t e = 0; e < E; ++e)
      logits[t * E + e] = 0.7f * order[e] - 1.5f + jitter(gen);
  }
  return logits;
}

TEST(RouterTest, ForwardMatchesNaive) {
  const int64_t T = 9, E = 6, K = 2;
  auto logits = randomVector(T * E, 81, -3.0f, 3.0f);
  RouterOut r = route(logits, T, E, K);
  for (int64_t t = 0; t < T; ++t) {
    double m = *std::max_element(&logits[t * E], &logits[t * E] + E);
    std::vector<double> p(E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e)
      sum += p[e] = std::exp(logits[t * E + e] - m);
    for (int64_t e = 0; e < E; ++e) {
      p[e] /= sum;
      EXPECT_NEAR(r.probs[t * E + e], p[e], 1e-6);
    }
    // Naive top-2 by full sort (stable: ties keep the lower id first).
    std::vector<int> ids(E);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int a, int b) { return p[a] > p[b]; });
    EXPECT_EQ(r.indices[t * K], ids[0]);
    EXPECT_EQ(r.indices[t * K + 1], ids[1]);
    double s = p[ids[0]] + p[ids[1]];
    EXPECT_NEAR(r.weights[t * K], p[ids[0]] / s, 1e-6);
    EXPECT_NEAR(r.weights[t * K + 1], p[ids[1]] / s, 1e-6);
  }
}

TEST(RouterTest, TiesGoToLowerId) {
  const int64_t E = 4, K = 2;
  std::vector<float> logits = {0.0f, 1.0f, 1.0f, 0.5f,  // tie between 1 and 2
                               3.0f, 3.0f, 3.0f, 3.0f,  // all equal
                               0.0f, 2.0f, -1.0f, 2.0f}; // tie between 1 and 3
  RouterOut r = route(logits, 3, E, K);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{1, 2, 0, 1, 1, 3}));
  EXPECT_FLOAT_EQ(r.weights[2], 0.5f);
  EXPECT_FLOAT_EQ(r.weights[3], 0.5f);
}

TEST(RouterTest, CapacityAdmitsSlotMajor) {
  // C = ceil(1.0 * 3 * 2 / 3) = 2. Preferences: t0 (0, 1), t1 (1, 0),
  // t2 (1, 2). First choices fill expert 1 (t1, t2), so t0's second choice
  // (expert 1) is dropped although t0 comes first; token-major admission
  // would instead drop t2's first choice.
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, //
                               1.0f, 2.0f, 0.0f, //
                               0.0f, 2.0f, 1.0f};
  RouterOut r = route(logits, 3, 3, 2, 1.0f);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{0, -1, 1, 0, 1, 2}));
  // A dropped slot keeps its renormalised weight.
  RouterOut unbounded = route(logits, 3, 3, 2);
  EXPECT_EQ(r.weights, unbounded.weights);
  EXPECT_EQ(r.probs, unbounded.probs);
}

TEST(RouterTest, CapacityDropsLaterTokens) {
  // All tokens prefer expert 0; C = ceil(1.0 * 4 * 1 / 2) = 2.
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, 0.0f, 3.0f, 0.0f, 1.0f, 0.5f};
  RouterOut r = route(logits, 4, 2, 1, 1.0f);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{0, 0, -1, -1}));
}

TEST(RouterTest, CapacityRoundsUp) {
  // All tokens prefer expert 0; C = ceil(1.0 * 10 * 1 / 4) = ceil(2.5) = 3.
  const int64_t T = 10, E = 4;
  std::vector<float> logits(T * E, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    logits[t * E] = 1.0f;
  RouterOut r = route(logits, T, E, 1, 1.0f);
  EXPECT_EQ(std::count(r.indices.begin(), r.indices.begin() + 3, 0), 3);
  EXPECT_EQ(std::count(r.indices.begin(), r.indices.end(), -1), 7);
}

TEST(RouterTest, CapacityFactorZeroDropsNothing) {
  const int64_t T = 16, E = 4, K = 2;
  auto logits = randomVector(T * E, 82);
  for (int64_t t = 0; t < T; ++t)
    logits[t * E] += 5.0f; // everyone wants expert 0
  RouterOut r = route(logits, T, E, K, 0.0f);
  EXPECT_EQ(std::count(r.indices.begin(), r.indices.end(), -1), 0);
}

class RouterBackwardTest
    : public ::testing::TestWithParam<std::tuple<bool, float>> {};

TEST_P(RouterBackwardTest, MatchesFiniteDifferences) {
  auto [withAux, cf] = GetParam();
  const int64_t T = 6, E = 5, K = 2;
  auto logits = separatedLogits(T, E, 83);
  auto dw = randomVector(T * K, 84);
  auto dp = randomVector(T * E, 85);
  RouterOut r = route(logits, T, E, K, cf);
  if (cf > 0.0f) {
    ASSERT_GT(std::count(r.indices.begin(), r.indices.end(), -1), 0);
  }
  std::vector<float> dlogits(T * E);
  routerBackward(dw.data(), withAux ? dp.data() : nullptr, r.probs.data(),
                 dlogits.data(), T, E, K);
  auto loss = [&] {
    RouterOut f = route(logits, T, E, K, cf);
    double l = dotDouble(dw.data(), f.weights.data(), T * K);
    if (withAux)
      l += dotDouble(dp.data(), f.probs.data(), T * E);
    return l;
  };
  GradCheckOptions options;
  options.step = 1e-2f;
  options.absTol = 1e-4;
  EXPECT_GRADIENT("dlogits", logits, dlogits, loss, options);
}

// Without and with the load-balancing dprobs; without and with capacity
// drops (a dropped slot's weight still depends on its expert's probability).
INSTANTIATE_TEST_SUITE_P(Cases, RouterBackwardTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(0.0f, 0.5f)));

TEST(RouterTest, BackwardWithOnlyAuxIsSoftmaxVjp) {
  const int64_t T = 3, E = 4, K = 1;
  auto logits = randomVector(T * E, 86);
  auto dp = randomVector(T * E, 87);
  RouterOut r = route(logits, T, E, K);
  std::vector<float> dw(T * K, 0.0f), dlogits(T * E);
  routerBackward(dw.data(), dp.data(), r.probs.data(), dlogits.data(), T, E,
                 K);
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0.0;
    for (int64_t e = 0; e < E; ++e)
      mean += r.probs[t * E + e] * dp[t * E + e];
    for (int64_t e = 0; e < E; ++e)
      EXPECT_NEAR(dlogits[t * E + e],
                  r.probs[t * E + e] * (dp[t * E + e] - mean), 1e-6);
  }
}

} // namespace
