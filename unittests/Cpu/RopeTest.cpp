//===- RopeTest.cpp - Tests of rotary position embedding ------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

constexpr float kTheta = 10000.0f;

TEST(RopeTest, PositionZeroIsIdentity) {
  const int64_t B = 2, S = 1, heads = 3, d = 8;
  auto x = randomVector(B * S * heads * d, 51);
  std::vector<float> y(x.size());
  ropeForward(x.data(), y.data(), B, S, heads, d, kTheta);
  EXPECT_TRUE(bitwiseEqual(x, y));
}

TEST(RopeTest, ForwardMatchesRotateHalfFormula) {
  const int64_t B = 2, S = 37, heads = 2, d = 6, half = d / 2;
  auto x = randomVector(B * S * heads * d, 52);
  std::vector<float> y(x.size());
  ropeForward(x.data(), y.data(), B, S, heads, d, kTheta);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        const float *xr = x.data() + ((b * S + s) * heads + h) * d;
        const float *yr = y.data() + ((b * S + s) * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          double angle = s * std::pow(10000.0, -2.0 * i / d);
          double lo = xr[i] * std::cos(angle) - xr[i + half] * std::sin(angle);
          double hi = xr[i + half] * std::cos(angle) + xr[i] * std::sin(angle);
          EXPECT_NEAR(yr[i], lo, 1e-6);
          EXPECT_NEAR(yr[i + half], hi, 1e-6);
        }
      }
}

TEST(RopeTest, SecondPairRotatesByInverseFrequency) {
  // d = 4: pair (1, 3) at position 2 turns by 2 * 10000^(-1/2) = 0.02 rad.
  const int64_t S = 3, d = 4;
  std::vector<float> x(S * d, 0.0f);
  x[2 * d + 1] = 1.0f; // position 2, element 1 (first half)
  std::vector<float> y(x.size());
  ropeForward(x.data(), y.data(), 1, S, 1, d, kTheta);
  EXPECT_NEAR(y[2 * d + 1], std::cos(0.02), 1e-7);
  EXPECT_NEAR(y[2 * d + 3], std::sin(0.02), 1e-7);
  EXPECT_EQ(y[2 * d + 0], 0.0f);
}

TEST(RopeTest, BackwardInvertsForwardInPlace) {
  const int64_t B = 1, S = 20, heads = 4, d = 16;
  auto x = randomVector(B * S * heads * d, 53);
  std::vector<float> buf = x;
  ropeForward(buf.data(), buf.data(), B, S, heads, d, kTheta);
  ropeBackward(buf.data(), buf.data(), B, S, heads, d, kTheta);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(buf[i], x[i], 1e-6);
}

TEST(RopeTest, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, S = 5, heads = 2, d = 4;
  const int64_t n = B * S * heads * d;
  auto x = randomVector(n, 54), dy = randomVector(n, 55);
  std::vector<float> y(n), dx(n);
  ropeBackward(dy.data(), dx.data(), B, S, heads, d, kTheta);
  auto loss = [&] {
    ropeForward(x.data(), y.data(), B, S, heads, d, kTheta);
    return dotDouble(dy.data(), y.data(), n);
  };
  EXPECT_GRADIENT("dx", x, dx, loss, GradCheckOptions());
}

// Document masking: positions restart at each document, so a document
// packed after others is rotated as if it were a sequence of its own, bit
// for bit; the backward likewise.
TEST(RopeTest, DocumentPositionsRotateEachDocumentAlone) {
  const int64_t S = 30, heads = 2, d = 8, width = heads * d;
  const int64_t lengths[] = {11, 1, 18};
  auto x = randomVector(S * width, 56);
  std::vector<int32_t> positions;
  for (int64_t length : lengths)
    for (int64_t p = 0; p < length; ++p)
      positions.push_back(static_cast<int32_t>(p));
  std::vector<float> y(x.size()), dx(x.size());
  ropeForward(x.data(), y.data(), 1, S, heads, d, kTheta, positions.data());
  ropeBackward(x.data(), dx.data(), 1, S, heads, d, kTheta, positions.data());
  int64_t start = 0;
  for (int64_t length : lengths) {
    std::vector<float> part(x.begin() + start * width,
                            x.begin() + (start + length) * width);
    std::vector<float> alone(part.size()), aloneBack(part.size());
    ropeForward(part.data(), alone.data(), 1, length, heads, d, kTheta);
    ropeBackward(part.data(), aloneBack.data(), 1, length, heads, d, kTheta);
    EXPECT_TRUE(bitwiseEqual(
        alone, std::vector<float>(y.begin() + start * width,
                                  y.begin() + (start + length) * width)));
    EXPECT_TRUE(bitwiseEqual(
        aloneBack, std::vector<float>(dx.begin() + start * width,
                                      dx.begin() + (start + length) * width)));
    start += length;
  }
}

} // namespace
