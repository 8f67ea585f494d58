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

#include "moe/Runtime/Cuda/GemmScaling.h"

#include <cstdint>

namespace moe::rt::cuda {

/// The widest heads the tensor-core attention takes (Kernels.h's
/// kFlashAttentionMaxHeadDim); wider ones run the fp32 kernels on widened
/// copies.
inline constexpr int64_t kTensorCoreAttentionMaxHeadDim = 128;

/// cuBLASLt's workspace, allocated once (GemmRunner::create).
inline constexpr uint64_t kGemmWorkspaceBytes = 32ull << 20;

/// The pool's granule: cudaMallocAsync hands out whole multiples of
/// cudaMalloc's 256-byte alignment (the virtual GPU's pool books them so),
/// so each live buffer may hold up to this many bytes more than it asked.
inline constexpr uint64_t kScratchGranule = 256;

/// The shapes and recipe of one Experts (or, `backward`, ExpertsGrad)
/// instruction, for expertsWorkspaceBytes.
struct ExpertsScratchShape {
  /// T tokens of width H, each routed to topK experts of width F, `experts`
  /// of them on this rank.
  int64_t tokens = 0, topK = 1, hidden = 0, ffn = 0, experts = 1;
  bool backward = false;
  /// Mixed precision: BF16 activations and BF16 working copies of the
  /// expert weights. Without it the weights are fp32.
  bool bf16 = false;
  /// FP8 expert GEMMs, blockwise scaled or not.
  bool fp8 = false, blockwise = false;
  /// Expert parallelism: the rows that may arrive on this rank, as a
  /// multiple of its own slots (the group's size for every slot of the
  /// group); 0 without expert parallelism (a group of one is 1).
  int64_t groupSize = 0;
  /// FP8 token dispatch: its block (0: rows travel in their storage type).
  int64_t fp8DispatchBlock = 0;
};

/// An upper bound of the scratch one Experts or ExpertsGrad instruction
/// holds at once (DeviceExperts.cpp, DeviceExpertParallel.cpp,
/// ExpertMatmul.cpp), from the buffers they allocate, in stream order, at
/// their peak. R rows are stacked, n <= R of them an expert's (all of them,
/// at worst); S = T topK slots; a GEMM's scratch lives while it runs.
///   * One rank's forward (expertsForwardOn): the grouping (16 S), u and g
///     (8 R F) and the larger of the up projections' phase, the gathered
///     rows (fp32 xs 4 R H and its BF16 copy 2 R H; the BF16 rows 2 R H
///     alone where gathered as stored; xs alone for FP8) and a GEMM's
///     scratch, and the down projection's, a's BF16 rows (2 R F, none for
///     FP8), z (4 R H) and a GEMM's scratch.
///   * One rank's backward (expertsBackwardOn): the grouping, the rows of
///     xs (as forward), dy (4 R H), the routing weights (4 R), u, g and a
///     (12 R F), then da (4 R F) and the largest of: da's GEMM, and (FP8)
///     a's rounding (4 R F), the dots (4 R), du's and dg's BF16 copies
///     (4 R F, none for FP8), dx's rows (4 R H) and the per-expert loop's
///     GEMMs or, after it, the ones (4 S).
///   * A GEMM's scratch (ExpertMatmul.cpp): with BF16 GEMMs the BF16 copy
///     of an fp32 operand, the weight gradient dW2 = (w dy)^T a copying
///     both (2 n (H + F)), da = dy W2 copying dy (2 n H), and fp32 weights
///     copied too (2 F H); with FP8 GEMMs both operands' codes (for dW
///     padded to 16 rows: (H + F) 16 ceil(n / 16)) and their scales;
///     blockwise, the activation's codes padded to 16 rows and its block
///     scales, the weight's codes and square scales, the padded output's
///     fp32 scratch, and for dW both operands' BF16 copies.
///   * Expert parallelism (expertParallelForward/Backward): the exchange's
///     tables (16 S + 4 R), the rows leaving and arriving in fp32 (forward
///     x out, y back; backward x and dy with the routing weight out, dx and
///     its weight gradient back), each transfer's wire buffers (BF16 or
///     FP8 rows, out and in), around the experts on the R rows that arrive
///     (one slot each, gathered in fp32) and, backward, the ones (4 S).
///   * BF16 storage the experts do not read as stored (FP8 GEMMs or expert
///     parallelism) is widened to fp32 for the instruction
///     (DeviceDispatch.cpp's runWidened): x and y, backward dy, x and dx
///     (4 T H each), and with FP8 GEMMs the weights (12 E F H).
///   * Each live buffer rounded up to kScratchGranule: at most 40 at once
///     (21 in the experts, 13 of expert parallelism's own, 6 wires).
inline uint64_t expertsWorkspaceBytes(const ExpertsScratchShape &shape) {
  auto u = [](int64_t v) { return static_cast<uint64_t>(v > 0 ? v : 0); };
  uint64_t t = u(shape.tokens), h = u(shape.hidden), f = u(shape.ffn),
           e = u(shape.experts);
  bool fp8 = shape.fp8, blockwise = shape.fp8 && shape.blockwise;
  bool parallel = shape.groupSize > 0;
  uint64_t slots = t * u(shape.topK);
  // The rows the experts run on, and the slots of the grouping among them:
  // expert parallel, one slot per row that arrives.
  uint64_t r = parallel ? slots * u(shape.groupSize) : slots;
  uint64_t groupedSlots = parallel ? r : slots;
  auto padded16 = [](uint64_t n) { return (n + 15) / 16 * 16; };
  auto maxOf = [](uint64_t a, uint64_t b) { return a > b ? a : b; };
  // The fp32 weights' BF16 copy, made by each BF16 GEMM that reads one.
  uint64_t weightCopy = !fp8 && !shape.bf16 ? 2 * f * h : 0;
  // Blockwise FP8's y[n, out] = x[n, k] w^T (blockScaledGemm).
  auto blockScaled = [&](uint64_t n, uint64_t k, uint64_t out) {
    uint64_t rows = padded16(n);
    uint64_t scales =
        4 * (static_cast<uint64_t>(gemmScaleCount(
                 GemmScaling::Rows128, static_cast<int64_t>(rows),
                 static_cast<int64_t>(k))) +
             static_cast<uint64_t>(gemmScaleCount(GemmScaling::Squares128,
                                                  static_cast<int64_t>(out),
                                                  static_cast<int64_t>(k))));
    return rows * k + out * k + scales + (rows != n ? 4 * rows * out : 0);
  };
  // Tensor-scaled FP8: two codes, two scales and an amax of 2 floats, each
  // a granule at most.
  uint64_t fp8Scales = 3 * kScratchGranule;
  // A projection x[n, k] by an expert weight of k x out (up: k = H,
  // out = F; down: k = F, out = H; da and dx: as the down and up).
  auto projection = [&](uint64_t k, uint64_t out, bool rowsHaveBf16) {
    if (blockwise)
      return blockScaled(r, k, out);
    if (fp8)
      return r * k + out * k + fp8Scales;
    return (rowsHaveBf16 ? 0 : 2 * r * k) + weightCopy;
  };
  // A weight gradient g^T x over n rows of widths a and b.
  auto weightGradient = [&](uint64_t a, uint64_t b, bool rowsHaveBf16) {
    if (blockwise)
      return 2 * r * (a + b);
    if (fp8)
      return (a + b) * padded16(r) + fp8Scales;
    return rowsHaveBf16 ? 0 : 2 * r * (a + b);
  };
  // The stacked x rows: BF16 as stored on one rank with BF16 GEMMs.
  bool asStored = shape.bf16 && !fp8 && !parallel;
  uint64_t xRows = asStored ? 2 * r * h : fp8 ? 4 * r * h : 6 * r * h;
  uint64_t grouping = 8 * (e + 1) + 16 * groupedSlots;
  uint64_t experts;
  if (!shape.backward) {
    uint64_t up = xRows + projection(h, f, /*rowsHaveBf16=*/true);
    uint64_t down = (fp8 ? 0 : 2 * r * f) + 4 * r * h +
                    projection(f, h, /*rowsHaveBf16=*/true);
    experts = grouping + 8 * r * f + maxOf(up, down);
  } else {
    // Until da: the grouping, x's and dy's rows, the routing weights, u, g
    // and a (the up projections, recomputed, on u and g).
    uint64_t early = grouping + xRows + 4 * r * h + 4 * r + 12 * r * f;
    uint64_t upPhase = early + projection(h, f, /*rowsHaveBf16=*/true);
    uint64_t daPhase =
        early + 4 * r * f + projection(h, f, /*rowsHaveBf16=*/false);
    // Then a's FP8 rounding (its amax's granule is below the loop's), the
    // dots, du's and dg's copies, dx's rows, and the loop: dW2 on w dy and
    // a, dx on du and dg (cast once, as x is), dW1 and dW3 on du, dg and
    // x; then the ones.
    uint64_t loop =
        maxOf(maxOf(weightGradient(h, f, /*rowsHaveBf16=*/false),
                    projection(f, h, /*rowsHaveBf16=*/true)),
              maxOf(weightGradient(f, h, /*rowsHaveBf16=*/true),
                    4 * groupedSlots));
    uint64_t loopPhase = early + 4 * r * f + (fp8 ? 4 * r * f : 4) + 4 * r +
                         (fp8 ? 0 : 4 * r * f) + 4 * r * h + loop;
    experts = maxOf(upPhase, maxOf(daPhase, loopPhase));
  }
  uint64_t bytes = experts;
  if (parallel) {
    // The wire's bytes of a row of H, for rows that travel narrowed.
    uint64_t fp8Row =
        shape.fp8DispatchBlock > 0
            ? 4 * ((h + 3) / 4 + (h + u(shape.fp8DispatchBlock) - 1) /
                                     u(shape.fp8DispatchBlock))
            : 0;
    uint64_t tokenWire = fp8Row ? fp8Row : shape.bf16 ? 2 * h : 0;
    uint64_t resultWire = shape.bf16 ? 2 * h : 0;
    uint64_t ends = slots + r;
    bytes += 16 * slots + 4 * r;
    if (shape.backward)
      bytes += 12 * ends * h + 8 * ends + (2 * tokenWire + resultWire) * ends;
    else
      bytes += 8 * ends * h + 4 * r + (tokenWire + resultWire) * ends;
    // The ones come after the experts' scratch is freed.
    if (shape.backward)
      bytes += 4 * slots > experts ? 4 * slots - experts : 0;
  }
  if (shape.bf16 && !asStored)
    bytes += (shape.backward ? 12 : 8) * t * h;
  if (shape.bf16 && fp8)
    bytes += 12 * e * f * h;
  return bytes + 40 * kScratchGranule;
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
