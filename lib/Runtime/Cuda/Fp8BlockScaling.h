//===- Fp8BlockScaling.h - blockwise FP8, one tile's work -------*- C++ -*-===//
//
// The blockwise FP8 recipe on the GPU (docs/fp8.md): an activation or
// gradient gets one scale per 1 x 128 run of a row, a weight one per
// 128 x 128 square, and each value is rounded onto the FP8 grid with its
// block's scale, as cpu::quantizeBlockwise rounds it. One thread block
// takes one tile (a run or a square) at a time: its largest magnitude, the
// scale (semantics::fp8Scale), then the codes, written where the
// block-scaled cuBLASLt GEMM reads them (row-major, or transposed for a
// weight the GEMM reads as W^T), with the inverse scale at its place in
// the GEMM's scale array (gemmScaleIndex); and, where a GEMM cannot take
// block scales (k along the tokens: the weight gradients), the values the
// codes stand for, in fp32 or BF16.
//
// Written against the Simt interface of FlashAttentionBlocks.h, so the
// device (Fp8Blocks.cu) and the CPU emulation
// (unittests/Cuda/Fp8BlocksEmulationTest.cpp) run the same code.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_FP8BLOCKSCALING_H
#define MOE_LIB_RUNTIME_CUDA_FP8BLOCKSCALING_H

#include "FlashAttentionBlocks.h"

#include "moe/Runtime/Cuda/GemmScaling.h"
#include "moe/Runtime/StepSemantics.h"

namespace moe::rt::cuda::fp8blocks {

/// Threads per block; the shared memory holds one float per thread.
inline constexpr int kThreads = 128;
/// The block of Hopper's block scaling (and so of the recipe on the GPU).
inline constexpr int64_t kBlock = 128;

struct Tiles {
  /// The source, row-major [rows, cols] fp32.
  const float *x;
  int64_t rows, cols;
  /// 1 (an activation's runs) or kBlock (a weight's squares, which must
  /// then be at most kThreads rows: a thread per run).
  int64_t tileRows;
  /// 0: E4M3, 1: E5M2 (Fp8Format's values).
  int format;
  /// Codes: x's [rows, cols] (ld cols), or with `transpose` x^T's
  /// [cols, codesLd]; null: none.
  uint8_t *codes;
  bool transpose;
  int64_t codesLd;
  /// Inverse scales at gemmScaleIndex(scaling, scaleRows, k, ...) of the
  /// codes matrix the GEMM reads (scaleRows its padded rows, k its
  /// columns); null: none.
  float *inverseScales;
  GemmScaling scaling;
  int64_t scaleRows;
  /// The rounded values, row-major [rows, cols] (null: none).
  float *rounded;
  uint16_t *roundedBf16;

  MOE_SIMT_SHAPE_FN int64_t rowTiles() const {
    return (rows + tileRows - 1) / tileRows;
  }
  MOE_SIMT_SHAPE_FN int64_t colTiles() const {
    return (cols + kBlock - 1) / kBlock;
  }
  MOE_SIMT_SHAPE_FN int64_t count() const { return rowTiles() * colTiles(); }
  MOE_SIMT_SHAPE_FN static size_t sharedBytes() {
    return kThreads * sizeof(float);
  }
};

/// The largest of two magnitudes, NaN once either is NaN (semantics::absMax
/// of a run spread over the threads).
MOE_SIMT_FN float maxMagnitude(float a, float b) {
  if (a != a)
    return a;
  if (b != b)
    return b;
  return a > b ? a : b;
}

template <typename Simt>
MOE_SIMT_FN void quantizeTiles(const Simt &simt, const Tiles &t) {
  float *shared = reinterpret_cast<float *>(simt.shared());
  int tid = simt.thread();
  for (int64_t tile = simt.blockX(); tile < t.count(); tile += simt.gridX()) {
    int64_t ti = tile / t.colTiles(), tj = tile % t.colTiles();
    int64_t r0 = ti * t.tileRows, c0 = tj * kBlock;
    int64_t r1 = r0 + t.tileRows < t.rows ? r0 + t.tileRows : t.rows;
    int64_t c1 = c0 + kBlock < t.cols ? c0 + kBlock : t.cols;
    int64_t width = c1 - c0, n = (r1 - r0) * width;
    // cpu::quantizeBlockwise's amax: the largest of its runs' absMax,
    // where a run holding a NaN counts for nothing (std::max keeps the
    // running value against NaN), so a NaN run gets scale 1 and a square
    // the scale of its other runs. A run of a square is one thread's; a
    // single run is spread over the threads.
    float amax = 0.0f;
    if (t.tileRows == 1) {
      for (int64_t e = tid; e < n; e += kThreads)
        amax = maxMagnitude(amax, fabsf(t.x[r0 * t.cols + c0 + e]));
    } else if (r0 + tid < r1) {
      amax = semantics::absMax(t.x + (r0 + tid) * t.cols + c0, width);
      amax = amax != amax ? 0.0f : amax;
    }
    shared[tid] = amax;
    simt.syncThreads();
    if (tid == 0) {
      float all = shared[0];
      for (int i = 1; i < kThreads; ++i)
        all = maxMagnitude(all, shared[i]);
      shared[0] = all;
    }
    simt.syncThreads();
    float tileMax = shared[0] != shared[0] ? 0.0f : shared[0];
    float scale =
        semantics::fp8Scale(tileMax, semantics::fp8MaxFinite(t.format));
    for (int64_t e = tid; e < n; e += kThreads) {
      int64_t r = r0 + e / width, c = c0 + e % width;
      uint8_t code = simt.encodeFp8(t.x[r * t.cols + c] * scale, t.format);
      if (t.codes)
        t.codes[t.transpose ? c * t.codesLd + r : r * t.cols + c] = code;
      if (t.rounded || t.roundedBf16) {
        // cpu::quantizeDequantize's value.
        float value = simt.decodeFp8(code, t.format) / scale;
        if (t.rounded)
          t.rounded[r * t.cols + c] = value;
        if (t.roundedBf16)
          t.roundedBf16[r * t.cols + c] = simt.toBf16(value);
      }
    }
    if (tid == 0 && t.inverseScales) {
      // The codes matrix the GEMM reads: x, or x^T (rows and k swap).
      int64_t row = t.transpose ? c0 : r0;
      int64_t kb = t.transpose ? ti : tj;
      int64_t k = t.transpose ? t.rows : t.cols;
      t.inverseScales[gemmScaleIndex(t.scaling, t.scaleRows, k, row, kb)] =
          1.0f / scale;
    }
    // The next tile reuses the shared slots.
    simt.syncThreads();
  }
}

} // namespace moe::rt::cuda::fp8blocks

#endif // MOE_LIB_RUNTIME_CUDA_FP8BLOCKSCALING_H
