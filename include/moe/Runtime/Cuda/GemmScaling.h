//===- GemmScaling.h - block scales of FP8 GEMM inputs ----------*- C++ -*-===//
//
// How the CUDA backend's FP8 GEMMs (Gemm.h) apply their inputs'
// dequantization scales, and where block scales go in the arrays cuBLASLt
// reads: shared by the GEMM descriptors, the kernels that quantize the
// inputs (on the device) and their tests, so it has no CUDA dependency.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_GEMMSCALING_H
#define MOE_RUNTIME_CUDA_GEMMSCALING_H

#include "moe/Runtime/StepSemantics.h"

#include <cstdint>

namespace moe::rt::cuda {

/// How an FP8 input's dequantization scales apply (cuBLASLt's scale
/// modes): one for the whole input, or Hopper's block scaling along k, the
/// blockwise recipe's (docs/fp8.md): one per 1 x 128 run of a row (an
/// activation, cuBLASLt's VEC128_32F) or per 128 x 128 square (a weight,
/// BLK128x128_32F).
enum class GemmScaling : uint8_t { Tensor = 0, Rows128 = 1, Squares128 = 2 };

/// The element count of an input's block scales (its scale pointer's
/// array) for `rows` x `k` stored with k innermost: Rows128 has
/// ceil(k / 128) groups of `rows` scales (rows innermost), Squares128
/// ceil(rows / 128) rows of ceil(k / 128) scales padded to a multiple of 4
/// (k innermost); Tensor one. gemmScaleIndex is where block (r, kb) goes.
/// (Both run on the device too: the quantizing kernels place the scales.)
MOE_HOST_DEVICE inline int64_t gemmScaleIndex(GemmScaling scaling, int64_t rows,
                                              int64_t k, int64_t row,
                                              int64_t kBlock) {
  int64_t kBlocks = (k + 127) / 128;
  switch (scaling) {
  case GemmScaling::Rows128:
    return kBlock * rows + row;
  case GemmScaling::Squares128:
    return row / 128 * ((kBlocks + 3) / 4 * 4) + kBlock;
  case GemmScaling::Tensor:
    break;
  }
  return 0;
}
MOE_HOST_DEVICE inline int64_t gemmScaleCount(GemmScaling scaling, int64_t rows,
                                              int64_t k) {
  int64_t kBlocks = (k + 127) / 128;
  switch (scaling) {
  case GemmScaling::Rows128:
    return kBlocks * rows;
  case GemmScaling::Squares128:
    return (rows + 127) / 128 * ((kBlocks + 3) / 4 * 4);
  case GemmScaling::Tensor:
    break;
  }
  return 1;
}

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_GEMMSCALING_H
