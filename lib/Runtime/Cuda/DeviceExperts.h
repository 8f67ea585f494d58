//===- DeviceExperts.h - the experts' steps on the GPU ----------*- C++ -*-===//
//
// Private to the CUDA backend: the experts' forward and backward on given
// tokens (one GPU's experts), and their expert-parallel form, which moves
// each token to the rank of its expert and back (DeviceExpertParallel.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_DEVICEEXPERTS_H
#define MOE_LIB_RUNTIME_CUDA_DEVICEEXPERTS_H

#include "ExpertMatmul.h"

namespace moe::rt::cuda {

struct ExpertShapes {
  /// Tokens, hidden and ffn widths, experts (this rank's), slots per token.
  int64_t T, H, F, E, topK;
};

/// Device operands of the experts: x [T, H], weights and indices [T, topK]
/// (ids of `shapes.E` experts; others, such as -1, take part in nothing),
/// w1, w3 [E, F, H], w2 [E, H, F].
struct ExpertsArgs {
  const float *x, *weights;
  const int32_t *indices;
  /// The expert weights' fp32 values, or null where they are read as BF16
  /// (w1Bf16, ...: the BF16 working copies, without FP8 GEMMs).
  const float *w1, *w3, *w2;
  const uint16_t *w1Bf16 = nullptr, *w3Bf16 = nullptr, *w2Bf16 = nullptr;
  ExpertShapes shapes;
  /// Mixed precision: the instruction's x (and, backward, dy) are BF16
  /// buffers, so their rows travel between ranks as BF16 (the values x
  /// holds here are BF16's, widened: the narrowing for the wire is exact).
  bool bf16X = false, bf16Dy = false;
  /// The result (y, or dx backward) is BF16: each assignment's row (its
  /// expert output, or input gradient) is rounded to BF16 before a token's
  /// rows are added in fp32, as on the CPU (cpu::expertsForward's
  /// bf16Rows), and travels back between ranks as BF16.
  bool bf16Rows = false;
  /// BF16 storage read and written as it is (readsBf16Operand: BF16 GEMMs
  /// on one rank): x (null then) and, backward, dy as BF16 bits; the
  /// forward's y into `yBf16` (instead of y), each token's sum rounded
  /// once, as the widened run rounds it.
  const uint16_t *xBf16 = nullptr, *dyBf16 = nullptr;
  uint16_t *yBf16 = nullptr;
  /// The saved up projections [T, topK, 2, F] (ExpertsWithHidden and its
  /// gradient, one rank): the forward writes them, the backward reads them
  /// instead of recomputing W1 x and W3 x.
  float *hiddenOut = nullptr;
  const float *hiddenIn = nullptr;
};

/// dx [T, H], dweights [T, topK], dw1, dw3 [E, F, H], dw2 [E, H, F].
struct ExpertGradients {
  float *dx, *dweights, *dw1, *dw3, *dw2;
  /// The weight gradients add to what dw1, dw3 and dw2 hold (a later chunk
  /// of an expert-parallel exchange) instead of replacing it.
  bool accumulate = false;
  /// dx into BF16 storage (bits) instead of dx (ExpertsArgs::yBf16's rule).
  uint16_t *dxBf16 = nullptr;
};

absl::Status expertsForwardOn(const DeviceStep &step, const ExpertMatmul &mm,
                              const ExpertsArgs &args, float *y);
absl::Status expertsBackwardOn(const DeviceStep &step, const ExpertMatmul &mm,
                               const ExpertsArgs &args, const float *dy,
                               const ExpertGradients &out);

/// Instruction `index` (with its group) expert parallel: `args` are this
/// rank's tokens and its share of the experts.
absl::Status expertParallelForward(const DeviceStep &step, size_t index,
                                   const ExpertMatmul &mm,
                                   const ExpertsArgs &args, float *y);
absl::Status expertParallelBackward(const DeviceStep &step, size_t index,
                                    const ExpertMatmul &mm,
                                    const ExpertsArgs &args, const float *dy,
                                    const ExpertGradients &out);

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_DEVICEEXPERTS_H
