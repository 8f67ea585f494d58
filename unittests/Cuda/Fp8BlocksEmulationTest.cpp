//===- Fp8BlocksEmulationTest.cpp - blockwise FP8 tiles on the CPU --------===//
//
// Runs the tiles of lib/Runtime/Cuda/Fp8BlockScaling.h, which the GPU's
// blockwise FP8 GEMMs read, under SimtEmulator.h (with the CPU's FP8
// conversions): the rounded values are cpu::quantizeBlockwise's bit for
// bit, each code is its value's, and each inverse scale sits where the
// block-scaled GEMM reads it; nothing else is written.
//
//===----------------------------------------------------------------------===//
#include "SimtEmulator.h"

#include "../../lib/Runtime/Cuda/Fp8BlockScaling.h"

#include "moe/Runtime/Cpu/Fp8.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace moe::rt::cuda::testing {
namespace {

using fp8blocks::kBlock;

/// Values of several magnitudes by tile, a tile of zeros, one NaN tile
/// (with `withNan`), and values that saturate.
std::vector<float> valuesOf(int64_t rows, int64_t cols, bool withNan) {
  std::mt19937 generator(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t tile = c / kBlock + r;
      float magnitude = tile % 3 == 0 ? 1e-3f : tile % 3 == 1 ? 1.0f : 3e4f;
      x[r * cols + c] =
          (r == 1 && c < kBlock) ? 0.0f : normal(generator) * magnitude;
    }
  if (withNan)
    x[2 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

uint32_t bitsOf(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

struct Case {
  int64_t rows, cols;
  bool squares, transpose;
  cpu::Fp8Format format;
  bool withNan;
};

void expectMatchesCpu(const Case &c) {
  SCOPED_TRACE("rows " + std::to_string(c.rows) + ", cols " +
               std::to_string(c.cols) + (c.squares ? ", squares" : ", runs") +
               (c.transpose ? ", transposed" : "") + ", format " +
               std::to_string(int(c.format)));
  std::vector<float> x = valuesOf(c.rows, c.cols, c.withNan);
  int64_t blockRows = c.squares ? kBlock : 1;
  std::vector<float> expected(x.size());
  cpu::quantizeBlockwise(x.data(), expected.data(), c.rows, c.cols, blockRows,
                         kBlock, c.format);

  // The GEMM's codes matrix: x, or x^T with its rows padded to 16.
  int64_t codeRows = c.transpose ? c.cols : c.rows;
  int64_t k = c.transpose ? c.rows : c.cols;
  int64_t ld = c.transpose ? (c.rows + 15) / 16 * 16 : c.cols;
  int64_t scaleRows = (codeRows + 3) / 4 * 4;
  GemmScaling scaling =
      c.squares ? GemmScaling::Squares128 : GemmScaling::Rows128;
  const uint8_t kUnwritten = 0xAB;
  std::vector<uint8_t> codes(size_t(codeRows * ld), kUnwritten);
  std::vector<float> scales(size_t(gemmScaleCount(scaling, scaleRows, k)),
                            -7.0f);
  std::vector<float> rounded(x.size(), -1.0f);
  std::vector<uint16_t> roundedBf16(x.size(), 0xFFFF);
  fp8blocks::Tiles tiles{
      x.data(),          c.rows,       c.cols,      blockRows,
      int(c.format),     codes.data(), c.transpose, ld,
      scales.data(),     scaling,      scaleRows,   rounded.data(),
      roundedBf16.data()};
  // Fewer blocks than tiles: the grid-stride loop takes the rest.
  int64_t grid = tiles.count() > 3 ? tiles.count() - 3 : 1;
  runEmulatedGrid(
      grid, 1, 1, fp8blocks::kThreads, fp8blocks::Tiles::sharedBytes(),
      [&](const HostSimt &simt) { fp8blocks::quantizeTiles(simt, tiles); });

  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(bitsOf(rounded[i]), bitsOf(expected[i])) << "value " << i;
    float asBf16;
    uint16_t bits = roundedBf16[i];
    cpu::castFromBf16(&bits, &asBf16, 1);
    uint16_t expectedBits;
    cpu::castToBf16(&expected[i], &expectedBits, 1);
    ASSERT_EQ(bits, expectedBits) << "bf16 value " << i;
  }
  // Every tile: its scale where the GEMM reads it, its codes those of
  // x * scale.
  std::vector<bool> scaleWritten(scales.size(), false);
  for (int64_t r0 = 0; r0 < c.rows; r0 += blockRows)
    for (int64_t c0 = 0; c0 < c.cols; c0 += kBlock) {
      int64_t r1 = std::min(c.rows, r0 + blockRows);
      int64_t c1 = std::min(c.cols, c0 + kBlock);
      // cpu::quantizeBlockwise's amax: runs holding a NaN count for nothing.
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        amax = std::max(amax, cpu::absMax(&x[r * c.cols + c0], c1 - c0));
      float scale = cpu::fp8Scale(amax, c.format);
      int64_t at = c.transpose
                       ? gemmScaleIndex(scaling, scaleRows, k, c0, r0 / kBlock)
                       : gemmScaleIndex(scaling, scaleRows, k, r0, c0 / kBlock);
      ASSERT_EQ(bitsOf(scales[at]), bitsOf(1.0f / scale))
          << "scale of tile (" << r0 << ", " << c0 << ")";
      scaleWritten[at] = true;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t col = c0; col < c1; ++col) {
          uint8_t code = codes[c.transpose ? col * ld + r : r * ld + col];
          ASSERT_EQ(code, cpu::encodeFp8(x[r * c.cols + col] * scale, c.format))
              << "code of (" << r << ", " << col << ")";
        }
    }
  for (size_t i = 0; i < scales.size(); ++i)
    if (!scaleWritten[i]) {
      ASSERT_EQ(scales[i], -7.0f) << "scale slot " << i << " was written";
    }
  if (c.transpose) {
    for (int64_t col = 0; col < c.cols; ++col)
      for (int64_t r = c.rows; r < ld; ++r)
        ASSERT_EQ(codes[col * ld + r], kUnwritten) << "padding was written";
  }
}

TEST(Fp8BlocksEmulationTest, RunsOfRowsAsTheCpuRoundsThem) {
  // Whole runs; a short last run and rows not a multiple of 4 (and a run
  // with a NaN, which gets scale 1); E5M2.
  expectMatchesCpu({40, 256, false, false, cpu::Fp8Format::E4M3, false});
  expectMatchesCpu({37, 301, false, false, cpu::Fp8Format::E4M3, true});
  expectMatchesCpu({9, 200, false, false, cpu::Fp8Format::E5M2, false});
}

TEST(Fp8BlocksEmulationTest, SquaresAsTheCpuRoundsThem) {
  // Weights [out, k] as the forward reads them, and [k, out] read
  // transposed (the backward's x W); partial squares on both sides; a
  // square with a NaN run, which takes the scale of its other runs.
  expectMatchesCpu({256, 384, true, false, cpu::Fp8Format::E4M3, false});
  expectMatchesCpu({300, 208, true, false, cpu::Fp8Format::E4M3, true});
  expectMatchesCpu({208, 300, true, true, cpu::Fp8Format::E4M3, true});
}

} // namespace
} // namespace moe::rt::cuda::testing
