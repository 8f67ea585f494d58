//===- Workspace.h - the CUDA backend's scratch, for the plans --*- C++ -*-===//
//
// The GPU memory the CUDA backend's instructions take from the stream-
// ordered pool while they run, outside the compiled memory plan's arena, as
// functions of the shapes alone, so that the compiler's memory plan and
// report (kernelWorkspaceBytes for a GPU target) and the planner count it
// and a plan that "fits" fits on the GPU. Header-only and free of CUDA: the
// compiler includes it. Each function mirrors the allocations of the code
// it names; a change there changes it here.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_WORKSPACE_H
#define MOE_RUNTIME_CUDA_WORKSPACE_H

#include <cstdint>

namespace moe::rt::cuda {

/// The widest heads the tensor-core attention takes (Kernels.h's
/// kFlashAttentionMaxHeadDim); wider ones run the fp32 kernels on widened
/// copies.
inline constexpr int64_t kTensorCoreAttentionMaxHeadDim = 128;

/// cuBLASLt's workspace, allocated once (GemmRunner::create).
inline constexpr uint64_t kGemmWorkspaceBytes = 32ull << 20;

/// One Experts (or, `backward`, ExpertsGrad) instruction
/// (DeviceExperts.cpp, DeviceExpertParallel.cpp): T tokens of width H, each
/// routed to topK experts of width F, `experts` of them on this rank.
///   * Every routed slot is a row of the stacked arrays (R = T topK); with
///     expert parallelism over `groupSize` ranks the rows arriving may be
///     every slot of the group (R = T topK groupSize), and the rows travel
///     through exchange buffers.
///   * Forward: the grouping (16 R), the gathered rows xs (4 R H) and their
///     BF16 copy (2 R H), u and g (8 R F), a's BF16 copy (2 R F), the
///     outputs z (4 R H).
///   * Backward: the grouping, xs and dy rows (8 R H), the routing weights,
///     dots and ones (12 R), u, g, a and da (16 R F), xs's BF16 copy (2 R H),
///     du's and dg's (4 R F), the input gradients dxs (4 R H).
///   * `bf16`: the instruction's activations are BF16. On one rank with
///     BF16 GEMMs the rows are gathered from them as they are (no fp32 xs);
///     with FP8 GEMMs or expert parallelism they are widened to fp32 for
///     the instruction (x and y; backward dy, x and dx: T H each).
///   * `fp8`: the expert weights are widened too (their fp32 values are
///     quantized), a's FP8 rounding (backward), and one GEMM's quantized
///     operands at a time.
///   * `blockwise` (ExpertMatmul.cpp): one GEMM's operands at a time, the
///     activation's codes with its rows padded to 16 and its block scales
///     (4 per 128 of a row), the padded output's fp32 scratch, and
///     (backward) the weight gradients' BF16 copies of both operands.
inline uint64_t expertsWorkspaceBytes(int64_t T, int64_t topK, int64_t H,
                                      int64_t F, int64_t experts, bool backward,
                                      bool fp8, bool bf16,
                                      int64_t groupSize = 1,
                                      bool blockwise = false) {
  uint64_t t = static_cast<uint64_t>(T), h = static_cast<uint64_t>(H),
           f = static_cast<uint64_t>(F), e = static_cast<uint64_t>(experts);
  uint64_t slots = t * static_cast<uint64_t>(topK);
  uint64_t r = slots * static_cast<uint64_t>(groupSize > 1 ? groupSize : 1);
  uint64_t bytes = 16 * r + 8 * (e + 1);
  // The fp32 xs rows, which BF16 storage read as it is leaves out.
  bool asStored = bf16 && !fp8 && groupSize <= 1;
  uint64_t xs = asStored ? 0 : 4 * r * h;
  if (backward)
    bytes += xs + 4 * r * h + 12 * r + 16 * r * f + 2 * r * h + 4 * r * f +
             4 * r * h;
  else
    bytes += xs + 2 * r * h + 8 * r * f + 2 * r * f + 4 * r * h;
  if (bf16 && !asStored)
    bytes += (backward ? 12 : 8) * t * h;
  if (fp8) {
    if (bf16)
      bytes += 3 * e * f * h * 4;
    bytes += (backward ? 4 * r * f : 0) + 2 * f * h + r * (h > f ? h : f);
  }
  if (fp8 && blockwise) {
    uint64_t wide = h > f ? h : f;
    bytes += 16 * wide + 4 * (r + 16) * ((wide + 127) / 128) +
             4 * (r + 16) * wide + (backward ? 2 * r * (h + f) : 0);
  }
  // Expert parallel: the rows leaving and arriving, the outputs and the
  // rows coming back (the backward's carry dy and a weight, and come back
  // with dx and dweight), at most fp32 wide.
  if (groupSize > 1)
    bytes += (backward ? 8 : 4) * (slots + r) * (h + 1) * 4;
  return bytes;
}

/// Attention's backward (its D per query row), tensor-core or fp32.
inline uint64_t attentionWorkspaceBytes(int64_t B, int64_t S, int64_t heads) {
  return B > 0 && S > 0 && heads > 0
             ? static_cast<uint64_t>(B * S * heads) * sizeof(float)
             : 0;
}

/// An instruction with BF16 buffers and no kernel for BF16 storage
/// (DeviceBf16.cpp says which have one): each BF16 operand and result is
/// widened into fp32 scratch for it.
inline uint64_t widenedBytes(int64_t bf16Elements) {
  return bf16Elements > 0 ? static_cast<uint64_t>(bf16Elements) * 4 : 0;
}

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_WORKSPACE_H
