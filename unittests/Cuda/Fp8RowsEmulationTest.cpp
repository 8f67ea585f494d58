//===- Fp8RowsEmulationTest.cpp - FP8 dispatch rows on the CPU ------------===//
//
// Runs the blocks of lib/Runtime/Cuda/Fp8RowBlocks.h, which the GPU's FP8
// token dispatch runs, under SimtEmulator.h (with the CPU's FP8
// conversions) and checks that they put cpu::packFp8Row's words on the wire
// and unpack them into cpu::unpackFp8Row's values, bit for bit.
//
//===----------------------------------------------------------------------===//
#include "SimtEmulator.h"

#include "../../lib/Runtime/Cuda/Fp8RowBlocks.h"

#include "gtest/gtest.h"

#include <cstring>
#include <random>

namespace moe::rt::cuda::testing {
namespace {

std::vector<float> rowsOf(int64_t count, int64_t width, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(size_t(count * width));
  for (int64_t r = 0; r < count; ++r)
    for (int64_t i = 0; i < width; ++i) {
      // Rows of several magnitudes, a block of zeros, a saturating value.
      float magnitude = r % 3 == 0 ? 1e-3f : r % 3 == 1 ? 1.0f : 1e4f;
      float value = normal(generator) * magnitude;
      if (r == 1 && i < 64)
        value = 0.0f;
      rows[r * width + i] = value;
    }
  return rows;
}

void expectMatchesCpu(int64_t count, int64_t width, int64_t block,
                      cpu::Fp8Format format) {
  SCOPED_TRACE("rows " + std::to_string(count) + ", width " +
               std::to_string(width) + ", block " + std::to_string(block) +
               ", format " + std::to_string(int(format)));
  std::vector<float> rows = rowsOf(count, width, 7);
  int64_t words = cpu::packedFp8Words(width, block);
  ASSERT_EQ((fp8rows::Layout{count, width, block, int(format)}.words()), words);
  std::vector<int32_t> expected(size_t(count * words));
  std::vector<float> expectedRows(rows.size());
  for (int64_t r = 0; r < count; ++r) {
    cpu::packFp8Row(rows.data() + r * width, width, block, format,
                    expected.data() + r * words);
    cpu::unpackFp8Row(expected.data() + r * words, width, block, format,
                      expectedRows.data() + r * width);
  }

  fp8rows::Layout layout{count, width, block, int(format)};
  // Poisoned: a word the blocks leave unwritten fails.
  std::vector<int32_t> packed(expected.size(), int32_t(0x7fc07fc0));
  int64_t blocks = (count * layout.blocksPerRow() + fp8rows::kThreads - 1) /
                   fp8rows::kThreads;
  // Fewer blocks than items: the grid-stride loop takes the rest.
  int64_t grid = blocks > 1 ? blocks - 1 : 1;
  runEmulatedGrid(grid, 1, 1, fp8rows::kThreads, 0, [&](const HostSimt &simt) {
    fp8rows::packBlock(simt, layout, rows.data(), packed.data());
  });
  EXPECT_EQ(packed, expected);

  std::vector<float> unpacked(rows.size(), -1.0f);
  runEmulatedGrid(grid, 1, 1, fp8rows::kThreads, 0, [&](const HostSimt &simt) {
    fp8rows::unpackBlock(simt, layout, expected.data(), unpacked.data());
  });
  EXPECT_EQ(0, std::memcmp(unpacked.data(), expectedRows.data(),
                           unpacked.size() * sizeof(float)));
}

TEST(Fp8RowsEmulationTest, TheCpusWordsAndValues) {
  // Whole blocks; a width of spare bytes and a short last block; E5M2 (the
  // gradients' format under tensorwise and delayed scaling).
  expectMatchesCpu(40, 256, 128, cpu::Fp8Format::E4M3);
  expectMatchesCpu(37, 301, 128, cpu::Fp8Format::E4M3);
  expectMatchesCpu(37, 301, 64, cpu::Fp8Format::E5M2);
}

} // namespace
} // namespace moe::rt::cuda::testing
