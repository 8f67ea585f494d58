//===- Fp8RowBlocks.h - FP8 rows on the wire, one block's work -*- C++ -*-===//
//
// FP8 token dispatch (expert parallelism with `fp8_dispatch`): each row
// leaves as FP8 codes, four to a 32-bit word, followed by one scale per
// `block` elements (as fp32 bits), and is unpacked on arrival into the
// values the codes stand for. The layout and the rounding are
// cpu::packFp8Row's and cpu::unpackFp8Row's (moe/Runtime/Cpu/Fp8.h), so a
// GPU rank and a CPU rank put the same words on the wire.
//
// Written against the Simt interface of FlashAttentionBlocks.h, with its
// FP8 conversions (encodeFp8: nearest even, saturating; decodeFp8), so the
// device (Fp8Rows.cu) and the CPU emulation
// (unittests/Cuda/Fp8RowsEmulationTest.cpp) run the same code. Each thread
// takes whole FP8 blocks of a row, in a grid-stride loop.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_FP8ROWBLOCKS_H
#define MOE_LIB_RUNTIME_CUDA_FP8ROWBLOCKS_H

#include "FlashAttentionBlocks.h"

#include "moe/Runtime/StepSemantics.h"

namespace moe::rt::cuda::fp8rows {

inline constexpr int kThreads = 128;

struct Layout {
  int64_t rows, width, block;
  /// 0: E4M3, 1: E5M2 (Fp8Format's values).
  int format;

  MOE_SIMT_SHAPE_FN int64_t blocksPerRow() const {
    return (width + block - 1) / block;
  }
  MOE_SIMT_SHAPE_FN int64_t codeWords() const { return (width + 3) / 4; }
  /// Words per packed row: the codes, then a scale per block
  /// (cpu::packedFp8Words).
  MOE_SIMT_SHAPE_FN int64_t words() const {
    return codeWords() + blocksPerRow();
  }
};

/// Item `item` of the grid-stride loops: FP8 block k of row r, elements
/// [b0, b1) of it.
struct RowBlock {
  int64_t r, k, b0, b1;
  MOE_SIMT_FN RowBlock(const Layout &layout, int64_t item)
      : r(item / layout.blocksPerRow()), k(item % layout.blocksPerRow()),
        b0(k * layout.block),
        b1(b0 + layout.block < layout.width ? b0 + layout.block
                                            : layout.width) {}
};

template <typename Simt>
MOE_SIMT_FN void packBlock(const Simt &simt, const Layout &layout,
                           const float *rows, int32_t *packed) {
  int64_t items = layout.rows * layout.blocksPerRow();
  for (int64_t item = simt.blockX() * kThreads + simt.thread(); item < items;
       item += simt.gridX() * kThreads) {
    auto [r, k, b0, b1] = RowBlock(layout, item);
    const float *row = rows + r * layout.width;
    int32_t *words = packed + r * layout.words();
    uint8_t *codes = reinterpret_cast<uint8_t *>(words);
    float scale = semantics::fp8Scale(semantics::absMax(row + b0, b1 - b0),
                                      semantics::fp8MaxFinite(layout.format));
    for (int64_t i = b0; i < b1; ++i)
      codes[i] = simt.encodeFp8(row[i] * scale, layout.format);
    // The last block's thread zeroes the last code word's spare bytes, as
    // the CPU clears the words before packing.
    if (k + 1 == layout.blocksPerRow())
      for (int64_t i = layout.width; i < layout.codeWords() * 4; ++i)
        codes[i] = 0;
    float *scales = reinterpret_cast<float *>(words + layout.codeWords());
    scales[k] = scale;
  }
}

template <typename Simt>
MOE_SIMT_FN void unpackBlock(const Simt &simt, const Layout &layout,
                             const int32_t *packed, float *rows) {
  int64_t items = layout.rows * layout.blocksPerRow();
  for (int64_t item = simt.blockX() * kThreads + simt.thread(); item < items;
       item += simt.gridX() * kThreads) {
    auto [r, k, b0, b1] = RowBlock(layout, item);
    const int32_t *words = packed + r * layout.words();
    const uint8_t *codes = reinterpret_cast<const uint8_t *>(words);
    float scale =
        reinterpret_cast<const float *>(words + layout.codeWords())[k];
    float *row = rows + r * layout.width;
    for (int64_t i = b0; i < b1; ++i)
      row[i] = simt.decodeFp8(codes[i], layout.format) / scale;
  }
}

} // namespace moe::rt::cuda::fp8rows

#endif // MOE_LIB_RUNTIME_CUDA_FP8ROWBLOCKS_H
