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

// A rank's block of the sequence (context parallelism: chunks 1 and 2 of 4
// of a 24-row sequence) rotates each row as the whole sequence does at its
// place: bitwise, forward and backward, and a document position past the
// block's length too.
TEST(RopeTest, ABlockRotatesByItsPlaceInTheWhole) {
  const int64_t B = 2, S = 24, heads = 2, d = 8, width = heads * d;
  auto x = randomVector(B * S * width, 54);
  std::vector<float> whole(x.size()), wholeBack(x.size());
  ropeForward(x.data(), whole.data(), B, S, heads, d, kTheta);
  ropeBackward(x.data(), wholeBack.data(), B, S, heads, d, kTheta);
  std::vector<SequenceRun> runs = {{0, 6, 6}, {6, 12, 6}};
  const int64_t rows = 12;
  std::vector<float> block(B * rows * width);
  for (int64_t b = 0; b < B; ++b)
    for (const SequenceRun &run : runs)
      std::copy_n(x.begin() + (b * S + run.whole) * width, run.length * width,
                  block.begin() + (b * rows + run.local) * width);
  std::vector<float> y(block.size()), back(block.size());
  ropeForward(block.data(), y.data(), B, rows, heads, d, kTheta, nullptr, runs);
  ropeBackward(block.data(), back.data(), B, rows, heads, d, kTheta, nullptr,
               runs);
  for (int64_t b = 0; b < B; ++b)
    for (const SequenceRun &run : runs)
      for (int64_t e = 0; e < run.length * width; ++e) {
        int64_t local = (b * rows + run.local) * width + e;
        int64_t at = (b * S + run.whole) * width + e;
        ASSERT_EQ(y[local], whole[at]);
        ASSERT_EQ(back[local], wholeBack[at]);
      }
  // Document positions up to 17 on a block of 12 rows.
  std::vector<int32_t> positions(B * rows);
  for (int64_t t = 0; t < B * rows; ++t)
    positions[t] = static_cast<int32_t>(6 + t % rows);
  ropeForward(block.data(), y.data(), B, rows, heads, d, kTheta,
              positions.data(), runs);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < rows; ++s)
      for (int64_t e = 0; e < width; ++e)
        ASSERT_EQ(y[(b * rows + s) * width + e],
                  whole[(b * S + 6 + s) * width + e]);
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
