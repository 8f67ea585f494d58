//===- ExpertMatmul.h - one expert's GEMMs, BF16 or FP8 ---------*- C++ -*-===//
//
// Private to the CUDA backend. The experts' forward and backward state their
// GEMMs on operands (an expert's rows of the stacked activations, its
// weights); this turns each into a cuBLASLt GEMM:
//   * BF16: operands read as BF16 where they are (BF16 weights, copies cast
//     once), the others cast; fp32 accumulation;
//   * FP8 (the artifact's tensorwise or delayed recipe, on sm_89+): each
//     operand quantized with its own per-expert scale, as the CPU emulation
//     rounds it (E4M3 values and weights, E5M2 gradients), and transposed
//     where cuBLASLt's FP8 GEMMs need x W^T; delayed scaling reads and
//     updates the operand's amax history;
//   * blockwise FP8 (sm_90): activations and gradients by 1 x 128 runs of
//     their rows, weights by 128 x 128 squares, everything E4M3, as the CPU
//     rounds them; x W^T and x W run on cuBLASLt's block scaling (k runs
//     along the blocks), with the rows padded to a multiple of 16 it needs.
//     The weight gradients' k runs along the tokens, across the blocks: they
//     read the same FP8 values as BF16 (exact for the codes, the scale
//     rounded to BF16's 8 bits) in a BF16 GEMM.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_EXPERTMATMUL_H
#define MOE_LIB_RUNTIME_CUDA_EXPERTMATMUL_H

#include "DeviceStep.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <optional>

namespace moe::rt::cuda {

/// A row-major [rows, cols] operand of expert `expert`'s GEMMs, and how FP8
/// reads it.
struct ExpertOperand {
  /// Its fp32 values; null when it has only BF16 ones (a BF16 expert
  /// weight without FP8 GEMMs).
  const float *data;
  int64_t rows, cols;
  cpu::Fp8ExpertRole role;
  Fp8Format format = Fp8Format::E4M3;
  /// Its BF16 values when they exist (a BF16 buffer, or a copy cast once
  /// for several GEMMs): BF16 GEMMs read them instead of casting `data`.
  const uint16_t *bf16 = nullptr;
};

/// The FP8 recipe of an Experts or ExpertsGrad instruction on the GPU.
struct DeviceFp8 {
  /// Blockwise: block scales of 128 (the capability record refuses other
  /// blocks at load).
  bool blockwise = false;
  bool delayed = false;
  /// Delayed: the instruction's amax histories [E, 9, length].
  float *history = nullptr;
  int64_t historyLength = 0;
};

class ExpertMatmul {
public:
  ExpertMatmul(const DeviceStep &step, std::optional<DeviceFp8> fp8)
      : step(step), fp8(fp8) {}

  bool usesFp8() const { return fp8.has_value(); }
  /// The gradients' format: E4M3 with block scales, else E5M2
  /// (cpu::fp8GradientFormat).
  Fp8Format gradientFormat() const {
    return fp8 && fp8->blockwise ? Fp8Format::E4M3 : Fp8Format::E5M2;
  }

  /// y[n, out] = x[n, k] w[out, k]^T + beta y.
  absl::Status xwT(int64_t expert, const ExpertOperand &x,
                   const ExpertOperand &w, float beta, float *y) const;
  /// y[n, out] = x[n, k] w[k, out] + beta y.
  absl::Status xw(int64_t expert, const ExpertOperand &x,
                  const ExpertOperand &w, float beta, float *y) const;
  /// dw[p, q] = g[n, p]^T x[n, q] + beta dw.
  absl::Status gTx(int64_t expert, const ExpertOperand &g,
                   const ExpertOperand &x, float beta, float *dw) const;
  /// out = the fp32 values a GEMM reads of `op`: op itself in BF16 mode
  /// (the kernels' other uses of it are fp32), its FP8 rounding with FP8
  /// (the CPU emulation rounds it in place, so later uses see that too).
  absl::Status rounded(int64_t expert, const ExpertOperand &op,
                       float *out) const;

private:
  const DeviceStep &step;
  std::optional<DeviceFp8> fp8;
};

/// Why instruction `index` (any opcode) cannot run on a GPU of this
/// compute capability, if it cannot: its FP8 expert GEMMs need sm_89 or
/// newer, block scaling sm_90 and blocks of 128. The backend asks at load,
/// so that an artifact for an H100 is refused on an A100 before it runs.
absl::Status checkFp8OnDevice(const Program &program, size_t index,
                              int computeCapability);

/// The FP8 recipe of Experts / ExpertsGrad instruction `index` as the GPU
/// runs it (none without one), or why it cannot (checkFp8OnDevice).
absl::StatusOr<std::optional<DeviceFp8>> deviceFp8Of(const DeviceStep &step,
                                                     size_t index);

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_EXPERTMATMUL_H
