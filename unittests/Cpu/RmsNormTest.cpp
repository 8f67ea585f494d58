//===- RmsNormTest.cpp - Tests of RMSNorm ---------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

constexpr float kEps = 1e-5f;

TEST(RmsNormTest, ForwardMatchesNaive) {
  const int64_t T = 5, H = 11;
  auto x = randomVector(T * H, 41, -3.0f, 3.0f);
  auto w = randomVector(H, 42, 0.5f, 1.5f);
  std::vector<float> y(T * H);
  rmsNormForward(x.data(), w.data(), y.data(), T, H, kEps);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i)
      ss += static_cast<double>(x[t * H + i]) * x[t * H + i];
    double r = 1.0 / std::sqrt(ss / H + kEps);
    for (int64_t i = 0; i < H; ++i) {
      double ref = w[i] * x[t * H + i] * r;
      EXPECT_NEAR(y[t * H + i], ref, 1e-5 * (1.0 + std::fabs(ref)));
    }
  }
}

TEST(RmsNormTest, UnitWeightGivesUnitRms) {
  const int64_t H = 64;
  auto x = randomVector(H, 43, -10.0f, 10.0f);
  std::vector<float> w(H, 1.0f), y(H);
  rmsNormForward(x.data(), w.data(), y.data(), 1, H, 0.0f);
  double ss = 0.0;
  for (float v : y)
    ss += static_cast<double>(v) * v;
  EXPECT_NEAR(ss / H, 1.0, 1e-5);
}

TEST(RmsNormTest, BackwardMatchesFiniteDifferences) {
  const int64_t T = 4, H = 9;
  auto x = randomVector(T * H, 44, -2.0f, 2.0f);
  auto w = randomVector(H, 45, 0.5f, 1.5f);
  auto dy = randomVector(T * H, 46);
  std::vector<float> y(T * H), dx(T * H), dw(H);
  rmsNormBackward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), T, H,
                  kEps);
  auto loss = [&] {
    rmsNormForward(x.data(), w.data(), y.data(), T, H, kEps);
    return dotDouble(dy.data(), y.data(), T * H);
  };
  GradCheckOptions options;
  options.step = 1e-3f;
  EXPECT_GRADIENT("dx", x, dx, loss, options);
  EXPECT_GRADIENT("dw", w, dw, loss, options);
}

} // namespace
