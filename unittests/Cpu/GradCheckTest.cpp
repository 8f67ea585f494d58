//===- GradCheckTest.cpp - The finite-difference checker itself -----------===//
//
// The gradient tests are only as good as their tolerances: these cases show
// that the checker accepts a right gradient and rejects plausible wrong ones.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

struct RmsNormCase {
  static constexpr int64_t T = 3, H = 8;
  std::vector<float> x = randomVector(T * H, 11);
  std::vector<float> w = randomVector(H, 12, 0.5f, 1.5f);
  std::vector<float> dy = randomVector(T * H, 13);
  std::vector<float> y = std::vector<float>(T * H);
  std::vector<float> dx = std::vector<float>(T * H);
  std::vector<float> dw = std::vector<float>(H);

  RmsNormCase() {
    rmsNormBackward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), T, H,
                    1e-5f);
  }
  double loss() {
    rmsNormForward(x.data(), w.data(), y.data(), T, H, 1e-5f);
    return dotDouble(dy.data(), y.data(), T * H);
  }
};

TEST(GradCheckTest, AcceptsCorrectGradient) {
  RmsNormCase c;
  auto result = checkGradient(c.x, c.dx, [&] { return c.loss(); });
  EXPECT_EQ(result.failures, 0) << result.firstFailure;
}

TEST(GradCheckTest, RejectsMissingTerm) {
  // dx without the projection term: dx = r * dy * w.
  RmsNormCase c;
  std::vector<float> wrong(c.T * c.H);
  for (int64_t t = 0; t < c.T; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < c.H; ++i)
      ss += c.x[t * c.H + i] * c.x[t * c.H + i];
    float r = static_cast<float>(1.0 / std::sqrt(ss / c.H + 1e-5));
    for (int64_t i = 0; i < c.H; ++i)
      wrong[t * c.H + i] = r * c.dy[t * c.H + i] * c.w[i];
  }
  auto result = checkGradient(c.x, wrong, [&] { return c.loss(); });
  EXPECT_GT(result.failures, 0);
}

TEST(GradCheckTest, RejectsFivePercentScaling) {
  RmsNormCase c;
  std::vector<float> wrong = c.dx;
  for (float &v : wrong)
    v *= 1.05f;
  auto result = checkGradient(c.x, wrong, [&] { return c.loss(); });
  EXPECT_GT(result.failures, 0);
}

TEST(GradCheckTest, RejectsOneWrongElement) {
  RmsNormCase c;
  std::vector<float> wrong = c.dw;
  wrong[3] += 0.05f;
  auto result = checkGradient(c.w, wrong, [&] { return c.loss(); });
  EXPECT_EQ(result.failures, 1);
}

} // namespace
