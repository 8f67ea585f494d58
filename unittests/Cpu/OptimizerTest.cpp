//===- OptimizerTest.cpp - Tests of grad norm, LR schedule and AdamW ------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

TEST(OptimizerTest, SumOfSquares) {
  std::vector<float> g = {1.0f, -2.0f, 3.0f};
  EXPECT_EQ(sumOfSquares(g.data(), 3), 14.0);
  EXPECT_EQ(sumOfSquares(g.data(), 0), 0.0);
  // 1e6 copies of 0.1f: a float accumulator would be off by ~1e-3 relative
  // (it stalls once the sum dwarfs each term); double stays within 1e-10.
  std::vector<float> many(1000000, 0.1f);
  double want = 1e6 * static_cast<double>(0.1f) * static_cast<double>(0.1f);
  EXPECT_NEAR(sumOfSquares(many.data(), many.size()), want, want * 1e-10);
}

TEST(OptimizerTest, LearningRateBoundaries) {
  const float peak = 1e-3f, min = 1e-4f;
  const int64_t warmup = 10, decay = 110;
  auto lr = [&](int64_t s) { return learningRate(s, peak, min, warmup, decay); };
  EXPECT_FLOAT_EQ(lr(0), peak / 10);  // first warmup step is not zero
  EXPECT_FLOAT_EQ(lr(4), peak / 2);
  EXPECT_FLOAT_EQ(lr(9), peak);       // last warmup step reaches the peak
  EXPECT_FLOAT_EQ(lr(10), peak);      // cosine starts at the peak
  EXPECT_FLOAT_EQ(lr(60), 0.5f * (peak + min)); // halfway
  double nearEnd = min + (peak - min) * 0.5 * (1.0 + std::cos(M_PI * 0.99));
  EXPECT_FLOAT_EQ(lr(109), static_cast<float>(nearEnd));
  EXPECT_GT(lr(109), min);
  EXPECT_EQ(lr(110), min); // decay reached
  EXPECT_EQ(lr(100000), min);
  // No warmup: step 0 is already on the cosine.
  EXPECT_FLOAT_EQ(learningRate(0, peak, min, 0, 100), peak);
}

TEST(OptimizerTest, LearningRateIsMonotoneAfterWarmup) {
  float prev = learningRate(10, 3e-4f, 3e-5f, 10, 200);
  for (int64_t s = 11; s < 220; ++s) {
    float cur = learningRate(s, 3e-4f, 3e-5f, 10, 200);
    EXPECT_LE(cur, prev) << s;
    prev = cur;
  }
}

TEST(OptimizerTest, AdamwFirstStepByHand) {
  // p = 1, g = 0.5, lr = 0.1, wd = 0.01: decay gives 0.999; m = 0.05,
  // v = (1 - b2) 0.25; m^ = 0.5, sqrt(v^) = 0.5; so
  // p = 0.999 - 0.1 * 0.5 / (0.5 + eps). (1 - 0.999f is 9.99987e-4 in fp32,
  // not 1e-3, but the bias correction divides the same value back out.)
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  adamw(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, /*step=*/0);
  EXPECT_FLOAT_EQ(m, 0.05f);
  EXPECT_FLOAT_EQ(v, (1.0f - 0.999f) * 0.25f);
  EXPECT_FLOAT_EQ(p, 0.899f);
}

TEST(OptimizerTest, AdamwMatchesReferenceOverSteps) {
  const int64_t n = 6;
  auto p = randomVector(n, 111), ref = std::vector<float>(p);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  for (int64_t step = 0; step < 5; ++step) {
    auto g = randomVector(n, 112 + step);
    float lr = learningRate(step, 1e-2f, 1e-3f, 2, 10);
    adamw(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, step);
    double t = step + 1;
    for (int64_t i = 0; i < n; ++i) {
      pd[i] -= lr * wd * pd[i];
      md[i] = b1 * md[i] + (1.0 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1.0 - b2) * g[i] * g[i];
      double mhat = md[i] / (1.0 - std::pow(b1, t));
      double vhat = vd[i] / (1.0 - std::pow(b2, t));
      pd[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], pd[i], 1e-6) << i;
    EXPECT_NEAR(m[i], md[i], 1e-6) << i;
    EXPECT_NEAR(v[i], vd[i], 1e-7) << i;
  }
}

TEST(OptimizerTest, AdamwWithoutDecayLeavesZeroGradParamAlone) {
  // Norm weights are not decayed: with wd = 0 and g = 0 the parameter stays.
  float p = 1.0f, g = 0.0f, m = 0.0f, v = 0.0f;
  adamw(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0);
  EXPECT_EQ(p, 1.0f);
}

} // namespace
