//===- Kernels.h - the CUDA backend's kernels -------------------*- C++ -*-===//
//
// The CUDA twins of moe/Runtime/Cpu/Kernels.h: the same functions, shapes
// and conventions (row-major, fp32 activations, int32 ids), on device
// pointers, enqueued on `stream`. Each returns the launch's status (a bad
// configuration, no device); errors inside a kernel surface at the next
// synchronisation. GEMMs are Gemm.h's.
//
// Numerics follow the CPU kernels up to the order of floating-point sums
// (reductions run in parallel trees, not in sequence), so results agree to
// rounding, not bitwise; test/gpu compares each kernel with its CPU twin.
// Where the CPU accumulates in double (norms, softmax sums, losses), so do
// these.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_KERNELS_H
#define MOE_RUNTIME_CUDA_KERNELS_H

#include "moe/Runtime/Cuda/Gemm.h"
#include "moe/Runtime/Cuda/StepCheck.h"
#include "moe/Runtime/Cuda/Workspace.h"

#include "absl/status/status.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace moe::rt::cuda {

//===----------------------------------------------------------------------===//
// Elementwise and casts
//===----------------------------------------------------------------------===//

/// y = a + b over n elements (y may alias a or b).
absl::Status add(const float *a, const float *b, float *y, int64_t n,
                 cudaStream_t stream);
/// y = silu(gate) * up.
absl::Status swigluForward(const float *gate, const float *up, float *y,
                           int64_t n, cudaStream_t stream);
/// dgate = dy * up * silu'(gate), dup = dy * silu(gate); may alias inputs.
absl::Status swigluBackward(const float *dy, const float *gate,
                            const float *up, float *dgate, float *dup,
                            int64_t n, cudaStream_t stream);
/// The same three on BF16 storage (bits), computed in fp32, each result
/// rounded once to nearest even: the bits of the fp32 kernels on widened
/// copies, without the copies (mixed precision's activations).
absl::Status add(const uint16_t *a, const uint16_t *b, uint16_t *y, int64_t n,
                 cudaStream_t stream);
absl::Status swigluForward(const uint16_t *gate, const uint16_t *up,
                           uint16_t *y, int64_t n, cudaStream_t stream);
absl::Status swigluBackward(const uint16_t *dy, const uint16_t *gate,
                            const uint16_t *up, uint16_t *dgate, uint16_t *dup,
                            int64_t n, cudaStream_t stream);
/// y = silu(gate) * up from fp32 into BF16 (bits), each result rounded
/// once: the fp32 kernel's result cast to BF16, in one pass (the experts'
/// activation, which only a BF16 GEMM reads).
absl::Status swigluForward(const float *gate, const float *up, uint16_t *y,
                           int64_t n, cudaStream_t stream);
/// x[0, n) = value.
absl::Status fill(float *x, float value, int64_t n, cudaStream_t stream);
/// y = x / divisor, element by element in fp32 (a division, not a product
/// with the reciprocal: the CPU's average over microbatches).
absl::Status divide(const float *x, float divisor, float *y, int64_t n,
                    cudaStream_t stream);
/// out = bf16(x), rounding to nearest even (as cpu::castToBf16): a GEMM's
/// BF16 input, a BF16 result computed in fp32, the Cast opcode.
absl::Status castToBf16(const float *x, uint16_t *out, int64_t n,
                        cudaStream_t stream);
/// out = the fp32 value of each BF16 (bits) x, exactly (cpu::castFromBf16).
absl::Status castFromBf16(const uint16_t *x, float *out, int64_t n,
                          cudaStream_t stream);
/// x = the fp32 value of bf16(x), in place (cpu::roundToBf16).
absl::Status roundToBf16(float *x, int64_t n, cudaStream_t stream);

/// A tensor split along a dimension with `outer` elements' worth of blocks
/// before it is [outer, parts, chunk] (elements of `elementBytes`, 4: floats
/// or ids, 2: BF16); a collective's buffer is [parts, outer, chunk]. pack:
/// to[r, o, :] = from[o, r, :]; unpack: the reverse (the CPU's Collectives
/// interleave).
absl::Status interleaveBlocks(const void *from, void *to, int64_t outer,
                              int64_t parts, int64_t chunk, bool pack,
                              cudaStream_t stream, int elementBytes = 4);

/// OCP FP8 formats (as cpu::Fp8Format).
enum class Fp8Format : uint8_t { E4M3 = 0, E5M2 = 1 };

/// FP8 token dispatch: each row of `rows` [count, width] as
/// cpu::packFp8Row packs it (its codes, four to a word, then one fp32
/// scale per `block` elements): cpu::packedFp8Words(width, block) int32
/// words per row, the same words a CPU rank sends. unpackFp8Rows gives back
/// the values the codes stand for.
absl::Status packFp8Rows(const float *rows, int64_t count, int64_t width,
                         int64_t block, Fp8Format format, int32_t *words,
                         cudaStream_t stream);
absl::Status unpackFp8Rows(const int32_t *words, int64_t count, int64_t width,
                           int64_t block, Fp8Format format, float *rows,
                           cudaStream_t stream);

/// amax[0] = max |x| over n elements (NaN if any is NaN).
absl::Status absMax(const float *x, int64_t n, float *amax,
                    cudaStream_t stream);
/// Tensorwise FP8 cast of an FP8 GEMM input: scale = maxFinite / amax (1
/// for 0 or a non-finite amax, as cpu::fp8Scale), codes[i] = fp8(x[i] *
/// scale) rounded to nearest even, saturating; inverseScale[0] = 1 / scale
/// (the GEMM's dequantization scale). `amax` is a device scalar (absMax's,
/// or a delayed scaling's history maximum).
absl::Status castToFp8(const float *x, const float *amax, uint8_t *codes,
                       float *inverseScale, int64_t n, Fp8Format format,
                       cudaStream_t stream);
/// out = the values castToFp8's codes stand for: fp8(x * scale) / scale
/// (cpu::quantizeDequantize with the same scale). out may be x.
absl::Status roundToFp8(const float *x, const float *amax, float *out,
                        int64_t n, Fp8Format format, cudaStream_t stream);
/// The transpose of a row-major [rows, cols] matrix, cast as castToFp8
/// does: out is [cols, outLd], outLd >= rows, with codes 0 (zero) in
/// columns [rows, outLd). FP8 GEMMs read only x W^T, so the backward's
/// operands are transposed on the way (Transformer Engine's cast-transpose),
/// and their k (rows here) padded to the multiple of 16 cuBLASLt needs.
absl::Status castTransposeToFp8(const float *x, const float *amax,
                                uint8_t *codes, float *inverseScale,
                                int64_t rows, int64_t cols, int64_t outLd,
                                Fp8Format format, cudaStream_t stream);

/// Where quantizeFp8Blocks writes (each optional): the codes (x's layout,
/// or with `transpose` x^T's [cols, codesLd]), the inverse scales of the
/// codes matrix at gemmScaleIndex(scaling, scaleRows, its columns, ...),
/// and the values the codes stand for, [rows, cols] in fp32 or BF16.
struct Fp8BlockOutputs {
  uint8_t *codes = nullptr;
  bool transpose = false;
  int64_t codesLd = 0;
  float *inverseScales = nullptr;
  GemmScaling scaling = GemmScaling::Tensor;
  int64_t scaleRows = 0;
  float *rounded = nullptr;
  uint16_t *roundedBf16 = nullptr;
};
/// The blockwise recipe's rounding of a row-major [rows, cols] x: one
/// scale per 1 x 128 run of a row, or with `squares` per 128 x 128 square
/// (cpu::quantizeBlockwise with block 128), for the block-scaled GEMMs
/// (Fp8BlockScaling.h).
absl::Status quantizeFp8Blocks(const float *x, int64_t rows, int64_t cols,
                               bool squares, Fp8Format format,
                               const Fp8BlockOutputs &out, cudaStream_t stream);

/// Delayed scaling of one GEMM input (cpu::quantizeDelayed): `history` is
/// its amax history of `length` (slot 0 this step's, then the past steps');
/// amaxToUse = the largest past amax, or *current when those are all 0;
/// then slot 0 = max(slot 0, *current) (NaN kept). All device pointers.
absl::Status delayedAmax(const float *current, float *history, int64_t length,
                         float *amaxToUse, cudaStream_t stream);
/// cpu::rollAmaxHistory on each of `rows` histories of `length`; nothing
/// once `check` (if given) records a failure, as adamw.
absl::Status rollAmaxHistories(float *histories, int64_t rows, int64_t length,
                               cudaStream_t stream,
                               const StepCheck *check = nullptr);

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// y[t, :] = table[tokens[t], :]; rows of ids outside [0, V) are zero and
/// *firstBad (device, initialised by the call) becomes the least such t,
/// or -1 when all are valid.
absl::Status embeddingForward(const int32_t *tokens, const float *table,
                              float *y, int64_t T, int64_t V, int64_t H,
                              int64_t *firstBad, cudaStream_t stream);
/// dtable[V, H] = sum over t with tokens[t] = v of dy[t, :] (overwritten);
/// ids outside [0, V) are skipped. Sums rows of one id in token order.
absl::Status embeddingBackward(const float *dy, const int32_t *tokens,
                               float *dtable, int64_t T, int64_t V, int64_t H,
                               cudaStream_t stream);
/// The same with a BF16 table and y (bits; rows copied as they are), and a
/// BF16 dy with the fp32 gradient.
absl::Status embeddingForward(const int32_t *tokens, const uint16_t *table,
                              uint16_t *y, int64_t T, int64_t V, int64_t H,
                              int64_t *firstBad, cudaStream_t stream);
absl::Status embeddingBackward(const uint16_t *dy, const int32_t *tokens,
                               float *dtable, int64_t T, int64_t V, int64_t H,
                               cudaStream_t stream);

//===----------------------------------------------------------------------===//
// RMSNorm and RoPE
//===----------------------------------------------------------------------===//

absl::Status rmsNormForward(const float *x, const float *w, float *y,
                            int64_t T, int64_t H, float eps,
                            cudaStream_t stream);
/// dx[T, H] and dw[H] (summed over the rows), both overwritten.
absl::Status rmsNormBackward(const float *dy, const float *x, const float *w,
                             float *dx, float *dw, int64_t T, int64_t H,
                             float eps, cudaStream_t stream);
/// Rotate-half RoPE of x viewed as [B, S, heads, headDim] (y may alias x).
absl::Status ropeForward(const float *x, float *y, int64_t B, int64_t S,
                         int64_t heads, int64_t headDim, float theta,
                         cudaStream_t stream);
absl::Status ropeBackward(const float *dy, float *dx, int64_t B, int64_t S,
                          int64_t heads, int64_t headDim, float theta,
                          cudaStream_t stream);
/// RMSNorm and RoPE on BF16 storage (bits): x, w, y, dy, dx BF16 and dw
/// fp32, computed as the fp32 kernels, each BF16 result rounded once.
absl::Status rmsNormForward(const uint16_t *x, const uint16_t *w, uint16_t *y,
                            int64_t T, int64_t H, float eps,
                            cudaStream_t stream);
absl::Status rmsNormBackward(const uint16_t *dy, const uint16_t *x,
                             const uint16_t *w, uint16_t *dx, float *dw,
                             int64_t T, int64_t H, float eps,
                             cudaStream_t stream);
absl::Status ropeForward(const uint16_t *x, uint16_t *y, int64_t B, int64_t S,
                         int64_t heads, int64_t headDim, float theta,
                         cudaStream_t stream);
absl::Status ropeBackward(const uint16_t *dy, uint16_t *dx, int64_t B,
                          int64_t S, int64_t heads, int64_t headDim,
                          float theta, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Causal attention with grouped-query heads
//===----------------------------------------------------------------------===//

/// As cpu::attentionForward: q [B, S, heads*d], k, v [B, S, kvHeads*d],
/// out [B, S, heads*d], lse [B, heads, S]; scale 1/sqrt(d); causal. One
/// warp per query row with an online softmax over the keys: no S x S scores
/// in memory. headDim <= 256.
absl::Status attentionForward(const float *q, const float *k, const float *v,
                              float *out, float *lse, int64_t B, int64_t S,
                              int64_t heads, int64_t kvHeads, int64_t headDim,
                              cudaStream_t stream);
/// The scratch attentionBackward needs: B * heads * S floats (the rows'
/// dout . out).
uint64_t attentionBackwardWorkspaceBytes(int64_t B, int64_t S, int64_t heads);
/// As cpu::attentionBackward, recomputing the probabilities from lse; dq,
/// dk, dv overwritten (a group's query heads sum into dk, dv in head order).
absl::Status attentionBackward(const float *dout, const float *q,
                               const float *k, const float *v,
                               const float *out, const float *lse, float *dq,
                               float *dk, float *dv, int64_t B, int64_t S,
                               int64_t heads, int64_t kvHeads,
                               int64_t headDim, float *workspace,
                               cudaStream_t stream);

/// The tensor-core attention (FlashAttention-2's tiling, BF16 operands,
/// fp32 accumulation; lib/Runtime/Cuda/FlashAttentionBlocks.h) for BF16
/// q, k, v, out, dout and gradients (bits), fp32 lse: the shapes and
/// conventions of attentionForward/Backward. The probabilities enter their
/// GEMMs rounded to BF16, so results agree with the fp32 kernels to BF16's
/// precision, not to rounding. Deterministic (no atomics). Head dims up to
/// kFlashAttentionMaxHeadDim; wider heads take the fp32 kernels.
inline constexpr int64_t kFlashAttentionMaxHeadDim =
    kTensorCoreAttentionMaxHeadDim;
bool flashAttentionSupports(int64_t headDim);
absl::Status flashAttentionForward(const uint16_t *q, const uint16_t *k,
                                   const uint16_t *v, uint16_t *out, float *lse,
                                   int64_t B, int64_t S, int64_t heads,
                                   int64_t kvHeads, int64_t headDim,
                                   cudaStream_t stream);
/// The scratch flashAttentionBackward needs: B * heads * S floats (D).
uint64_t flashAttentionBackwardWorkspaceBytes(int64_t B, int64_t S,
                                              int64_t heads);
absl::Status flashAttentionBackward(const uint16_t *dout, const uint16_t *q,
                                    const uint16_t *k, const uint16_t *v,
                                    const uint16_t *out, const float *lse,
                                    uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                    int64_t B, int64_t S, int64_t heads,
                                    int64_t kvHeads, int64_t headDim,
                                    float *workspace, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Router and experts
//===----------------------------------------------------------------------===//

/// As cpu::routerForward: softmax, top-k (descending, ties to the lower
/// id), renormalised weights, then capacity dropping (slot-major, -1).
/// E <= 1024.
absl::Status routerForward(const float *logits, float *probs, float *weights,
                           int32_t *indices, int64_t T, int64_t E, int64_t topK,
                           float capacityFactor, cudaStream_t stream);
/// As cpu::routerBackward (dprobs may be null).
absl::Status routerBackward(const float *dweights, const float *dprobs,
                            const float *probs, float *dlogits, int64_t T,
                            int64_t E, int64_t topK, cudaStream_t stream);

/// Tokens grouped by expert (the permutation of the grouped GEMMs), as
/// cpu's ExpertGroups: offsets[e] .. offsets[e + 1] are the flat slots
/// t * topK + j routed to expert e, ascending (ids outside [0, E) skipped).
/// offsets has E + 1 entries, slots T * topK (the first offsets[E] used).
absl::Status groupByExpert(const int32_t *indices, int64_t T, int64_t E,
                           int64_t topK, int64_t *offsets, int64_t *slots,
                           cudaStream_t stream);
/// Permute: rows[r, :] = x[slots[r] / topK, :] for r < count.
absl::Status gatherRows(const float *x, const int64_t *slots, int64_t count,
                        int64_t topK, int64_t width, float *rows,
                        cudaStream_t stream);
/// The same from BF16 storage (bits): into BF16 rows as they are, or into
/// fp32 rows widened (exactly).
absl::Status gatherRows(const uint16_t *x, const int64_t *slots, int64_t count,
                        int64_t topK, int64_t width, uint16_t *rows,
                        cudaStream_t stream);
absl::Status gatherRows(const uint16_t *x, const int64_t *slots, int64_t count,
                        int64_t topK, int64_t width, float *rows,
                        cudaStream_t stream);
/// Unpermute and combine: y[t, :] = sum over j (in expert order, as the CPU
/// adds them) of weights[t, j] * rows[position of slot t * topK + j, :];
/// `positionOfSlot` [T * topK] gives each slot's row (-1: dropped, adds
/// nothing). y is overwritten.
absl::Status combineRows(const float *rows, const int64_t *positionOfSlot,
                         const int32_t *indices, const float *weights,
                         int64_t T, int64_t topK, int64_t width, float *y,
                         cudaStream_t stream);
/// The same into a BF16 y (bits): each fp32 sum rounded once, to nearest
/// even, as a widened y's cast rounds it.
absl::Status combineRows(const float *rows, const int64_t *positionOfSlot,
                         const int32_t *indices, const float *weights,
                         int64_t T, int64_t topK, int64_t width, uint16_t *y,
                         cudaStream_t stream);
/// out[r] = sum_i a[r, i] * b[r, i] (in double) for `rows` rows of
/// `width`: the routing weights' gradients (a . da').
absl::Status rowDots(const float *a, const float *b, int64_t rows,
                     int64_t width, float *out, cudaStream_t stream);
/// x[r, :] *= scales[r] for `rows` rows of `width`.
absl::Status scaleRows(float *x, const float *scales, int64_t rows,
                       int64_t width, cudaStream_t stream);
/// out[slots[r]] = values[r] for r < count (other elements untouched).
absl::Status scatterValues(const float *values, const int64_t *slots,
                           int64_t count, float *out, cudaStream_t stream);
/// The experts' saved up projections, hidden [numSlots, 2, F]: slot s gets
/// (u, g)[positionOfSlot[s]], zeros where that is -1 (a dropped slot).
absl::Status saveHidden(const float *u, const float *g,
                        const int64_t *positionOfSlot, int64_t numSlots,
                        int64_t F, float *hidden, cudaStream_t stream);
/// Their inverse for the grouped rows: u[r], g[r] = hidden[slots[r]] for
/// r < count.
absl::Status loadHidden(const float *hidden, const int64_t *slots,
                        int64_t count, int64_t F, float *u, float *g,
                        cudaStream_t stream);
/// positionOfSlot[slots[r]] = r for r < offsets[E]; -1 for the other slots.
absl::Status invertSlots(const int64_t *slots, const int64_t *offsets,
                         int64_t E, int64_t numSlots, int64_t *positionOfSlot,
                         cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// sums[0] += sum over rows with a target in [0, V) of -log softmax[target]
/// (double), count[0] += those rows; both device scalars the caller zeroes.
absl::Status crossEntropySums(const float *logits, const int32_t *targets,
                              int64_t T, int64_t V, double *sum,
                              unsigned long long *count, cudaStream_t stream);
/// dlogits = (dloss / count) (softmax - onehot) on counted rows, 0 elsewhere
/// and everywhere when count is 0. dloss and count are host values.
absl::Status crossEntropyBackward(float dloss, const float *logits,
                                  const int32_t *targets, float *dlogits,
                                  int64_t T, int64_t V, int64_t count,
                                  cudaStream_t stream);
/// Cross-entropy on BF16 logits (bits) and, backward, into BF16 dlogits:
/// the full logits are never widened into an fp32 copy.
absl::Status crossEntropySums(const uint16_t *logits, const int32_t *targets,
                              int64_t T, int64_t V, double *sum,
                              unsigned long long *count, cudaStream_t stream);
absl::Status crossEntropyBackward(float dloss, const uint16_t *logits,
                                  const int32_t *targets, uint16_t *dlogits,
                                  int64_t T, int64_t V, int64_t count,
                                  cudaStream_t stream);
/// The load-balancing loss's statistics (cpu::AuxLossStatistics):
/// count[e] (top-k selections, recomputed from probs) and probSum[e]
/// (double), overwritten.
absl::Status auxLossStatistics(const float *probs, int64_t T, int64_t E,
                               int64_t topK, unsigned long long *count,
                               double *probSum, cudaStream_t stream);
/// dprobs[t, e] = dloss * E * count[e] / tokens^2 (count on the device).
absl::Status auxLossBackward(float dloss, const unsigned long long *count,
                             int64_t tokens, float *dprobs, int64_t T,
                             int64_t E, cudaStream_t stream);
/// The same three with dloss (and count) device scalars: a step that keeps
/// its scalars on the device (StepScalars.cu) never waits to learn them.
absl::Status crossEntropyBackward(const float *dloss,
                                  const unsigned long long *count,
                                  const float *logits, const int32_t *targets,
                                  float *dlogits, int64_t T, int64_t V,
                                  cudaStream_t stream);
absl::Status crossEntropyBackward(const float *dloss,
                                  const unsigned long long *count,
                                  const uint16_t *logits,
                                  const int32_t *targets, uint16_t *dlogits,
                                  int64_t T, int64_t V, cudaStream_t stream);
absl::Status auxLossBackward(const float *dloss,
                             const unsigned long long *count, int64_t tokens,
                             float *dprobs, int64_t T, int64_t E,
                             cudaStream_t stream);

//===----------------------------------------------------------------------===//
// A step's scalars and checks on the device (StepScalars.cu)
//===----------------------------------------------------------------------===//

/// *count = the targets in [0, V) among T (engine::checkTargets' count);
/// *firstBad = the least t with targets[t] >= V, or -1. Device scalars.
absl::Status countTargets(const int32_t *targets, int64_t T, int64_t V,
                          unsigned long long *count, int64_t *firstBad,
                          cudaStream_t stream);
/// *loss = semantics::crossEntropyMean(*sum, *count).
absl::Status crossEntropyMean(const double *sum,
                              const unsigned long long *count, float *loss,
                              cudaStream_t stream);
/// *loss = semantics::auxLossFromStatistics over E experts and `tokens`.
absl::Status auxLossFromStatistics(const unsigned long long *count,
                                   const double *probSum, int64_t E,
                                   int64_t tokens, float *loss,
                                   cudaStream_t stream);
/// *norm = semantics::normFromSquares(squares, n).
absl::Status normFromSquares(const double *squares, int64_t n, float *norm,
                             cudaStream_t stream);
/// *coefficient = semantics::clipCoefficient(maxNorm, *norm).
absl::Status clipCoefficient(float maxNorm, const float *norm,
                             float *coefficient, cudaStream_t stream);
/// The most terms weightedSum takes (a loss has one per loss term: the
/// cross-entropy and an aux loss per MoE layer, 59 for DeepSeek-V3); they
/// travel as kernel parameters (1.5 KiB of the 4 KiB).
inline constexpr int64_t kMaxWeightedTerms = 128;
/// *sum = semantics::weightedSum(coefficients, *values[0..n)): `values` a
/// host array of n device scalars, `coefficients` n host values.
absl::Status weightedSum(const float *const *values, const float *coefficients,
                         int64_t n, float *sum, cudaStream_t stream);
/// When *firstBad >= 0 and `check` records no failure yet: records the id
/// ids[*firstBad] of buffer `idsBuffer` outside [0, limit), found by
/// `instruction`.
absl::Status recordBadId(const int64_t *firstBad, const int32_t *ids,
                         StepCheck::Kind kind, uint32_t instruction,
                         uint32_t idsBuffer, int64_t limit, StepCheck *check,
                         cudaStream_t stream);
/// When *value is not finite and `check` records no failure yet: records
/// it as `kind` (NonFiniteLoss, NonFiniteNorm) of `instruction`.
absl::Status recordIfNotFinite(const float *value, StepCheck::Kind kind,
                               uint32_t instruction, StepCheck *check,
                               cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// sum[0] += sum of squares of g (double), in the same order on every run;
/// the caller zeroes it.
absl::Status sumOfSquares(const float *g, int64_t n, double *sum,
                          cudaStream_t stream);
/// As cpu::adamw, with the gradient scaled by *gradScale (device scalar:
/// the clipping coefficient) and lr a host value. With `working` (mixed
/// precision's BF16 working copy of param), working[i] = bf16(updated
/// param[i]), rounded to nearest even.
/// With `check`, nothing is written once it records a failure (the CPU
/// stops the step before its optimizer).
absl::Status adamw(float *param, const float *grad, const float *gradScale,
                   float *expAvg, float *expAvgSq, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weightDecay,
                   int64_t step, cudaStream_t stream,
                   uint16_t *working = nullptr,
                   const StepCheck *check = nullptr);

/// out[i] = rows[0][i] + rows[1][i] + ... in row order, over `parts` rows
/// of n values: comm::sumOverGroup's sum of the ranks' gathered values
/// (GroupSums.cu). out may be a row.
absl::Status sumRowsInRankOrder(const double *rows, int64_t parts, int64_t n,
                                double *out, cudaStream_t stream);
absl::Status sumRowsInRankOrder(const unsigned long long *rows, int64_t parts,
                                int64_t n, unsigned long long *out,
                                cudaStream_t stream);
/// to[i] = from[at[i]], and to[at[i]] = from[i], for i < n (`at` on the
/// device).
absl::Status gatherDoubles(const double *from, const int64_t *at, int64_t n,
                           double *to, cudaStream_t stream);
absl::Status scatterDoubles(const double *from, const int64_t *at, int64_t n,
                            double *to, cudaStream_t stream);

/// One tensor of a multi-tensor AdamW (adamwMany): device pointers as
/// adamw takes them, `working` optional, and the tensor's weight decay.
struct AdamwTensor {
  float *param;
  const float *grad;
  float *expAvg, *expAvgSq;
  uint16_t *working;
  int64_t n;
  float weightDecay;
};
/// adamw on `count` tensors (a host array) that share the learning rate,
/// betas, eps, step and gradient scale, in one launch: each element gets
/// the bits a call per tensor gives it (the same per-element code), as
/// Megatron's and PyTorch's fused multi-tensor optimizers do without the
/// launch per parameter. Nothing once `check` records a failure.
absl::Status adamwMany(const AdamwTensor *tensors, int64_t count,
                       const float *gradScale, float lr, float beta1,
                       float beta2, float eps, int64_t step,
                       cudaStream_t stream, const StepCheck *check = nullptr);

/// out[i] = bf16(rows[0][i] + rows[1][i] + ... + rows[parts - 1][i]) over
/// `parts` rows of n BF16 values (bits): added in fp32 in row order and
/// rounded once to nearest even, the CPU's sum over ranks of BF16 values
/// (the BF16 collectives' reduction, Bf16Sum.cu). out may be a row.
absl::Status sumBf16Rows(const uint16_t *rows, int64_t parts, int64_t n,
                         uint16_t *out, cudaStream_t stream);

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_KERNELS_H
