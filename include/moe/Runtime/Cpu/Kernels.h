//===- Kernels.h - fp32 CPU kernels of the moe runtime ----------*- C++ -*-===//
//
// One function per forward op and per VJP rule of docs/semantics.md. All
// tensors are dense, row-major fp32 (ids are int32). Outputs are overwritten,
// never accumulated into, unless the name says `Accumulate`. Activations of
// shape [B, S, X] are passed as [T, X] with T = B * S where the sequence
// structure does not matter. The kernels are deterministic: same inputs give
// bitwise the same outputs on every run (no threading-order dependent sums).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CPU_KERNELS_H
#define MOE_RUNTIME_CPU_KERNELS_H

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cpu/RopeFrequencies.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::cpu {

//===----------------------------------------------------------------------===//
// Linear algebra (OpenBLAS sgemm)
//===----------------------------------------------------------------------===//

/// Threads the kernels may use: one pool for all of them (ThreadPool.h),
/// with OpenBLAS itself on one thread. By default OPENBLAS_NUM_THREADS or
/// OMP_NUM_THREADS, else the process's cores shared among the ranks that
/// the launcher put on the node (ThreadPool.cpp). Results are bitwise
/// reproducible for a given thread count; another count may change the last
/// bits, because the GEMMs are cut into other blocks.
void setNumThreads(int threads);
int numThreads();
/// What is wrong with OPENBLAS_NUM_THREADS or OMP_NUM_THREADS (each a thread
/// count in [1, 4096]; OMP_NUM_THREADS may list one per nesting level),
/// naming the variable and its value; empty when each is unset, empty or
/// valid. The default thread count skips an invalid variable; moe-run
/// refuses one unless --threads overrides it.
std::string threadVariableError();

/// y[T, N] = x[T, K] * w[N, K]^T.
void linearForward(const float *x, const float *w, float *y, int64_t T,
                   int64_t K, int64_t N);
/// y[T, N] = addend[T, N] + x[T, K] * w[N, K]^T, the product added in the
/// GEMM's epilogue (y may be addend).
void linearForwardAccumulate(const float *x, const float *w,
                             const float *addend, float *y, int64_t T,
                             int64_t K, int64_t N);
/// dx[T, K] = addend[T, K] + dy[T, N] * w[N, K] (dx may be addend).
void linearBackwardInputAccumulate(const float *dy, const float *w,
                                   const float *addend, float *dx, int64_t T,
                                   int64_t K, int64_t N);
/// dx[T, K] = dy[T, N] * w[N, K].
void linearBackwardInput(const float *dy, const float *w, float *dx, int64_t T,
                         int64_t K, int64_t N);
/// dw[N, K] = dy[T, N]^T * x[T, K].
void linearBackwardWeight(const float *dy, const float *x, float *dw, int64_t T,
                          int64_t K, int64_t N);

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// BF16 (bits) from fp32, rounding to nearest even and keeping NaNs quiet,
/// and back, exactly (moe::rt::io's conversions, over n elements).
void castToBf16(const float *x, uint16_t *y, int64_t n);
void castFromBf16(const uint16_t *x, float *y, int64_t n);
/// x = the fp32 value of bf16(x), in place: what a BF16 store and load of x
/// give back.
void roundToBf16(float *x, int64_t n);

/// y = a + b over n elements (y may alias a or b).
void add(const float *a, const float *b, float *y, int64_t n);
/// y = silu(gate) * up.
void swigluForward(const float *gate, const float *up, float *y, int64_t n);
/// dgate = dy * up * silu'(gate), dup = dy * silu(gate). Element i is read
/// before it is written, so dgate/dup may alias any of the inputs.
void swigluBackward(const float *dy, const float *gate, const float *up,
                    float *dgate, float *dup, int64_t n);

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// y[t, :] = table[tokens[t], :]. Returns the index t of the first token id
/// outside [0, V), or -1 when all are valid (then y is fully written).
int64_t embeddingForward(const int32_t *tokens, const float *table, float *y,
                         int64_t T, int64_t V, int64_t H);
/// dtable[V, H] = sum over t with tokens[t] = v of dy[t, :]. Ids outside
/// [0, V) are skipped (the forward already reported them).
void embeddingBackward(const float *dy, const int32_t *tokens, float *dtable,
                       int64_t T, int64_t V, int64_t H);

//===----------------------------------------------------------------------===//
// RMSNorm
//===----------------------------------------------------------------------===//

/// y[t, i] = w[i] * (x[t, i] * r[t]), r[t] = 1 / sqrt(mean_i x[t, i]^2 + eps)
/// (row sums in double).
void rmsNormForward(const float *x, const float *w, float *y, int64_t T,
                    int64_t H, float eps);
/// dx[T, H] and dw[H] (summed over all T rows), both overwritten.
void rmsNormBackward(const float *dy, const float *x, const float *w,
                     float *dx, float *dw, int64_t T, int64_t H, float eps);

//===----------------------------------------------------------------------===//
// RoPE (rotate-half), x viewed as [B, S, heads, headDim]
//===----------------------------------------------------------------------===//

/// A run of a rank's block of the sequence that is contiguous in the whole
/// sequence (context parallelism's load-balanced split has two per rank):
/// rows [local, local + length) of the block are positions [whole, whole +
/// length) of the sequence.
struct SequenceRun {
  int64_t local = 0, whole = 0, length = 0;
};

/// Rotates pairs (i, i + headDim/2) by p * theta^(-2i/headDim) at position
/// p = s, or p = positions[b, s] with `positions` ([B, S], non-negative:
/// document masking's positions in each document); angles and their
/// cos/sin are evaluated in double. With `runs` (context parallelism, S
/// the rank's block), p is s's position in the whole sequence instead of s.
/// With `scaling` (scaled RoPE), the frequencies are
/// ropeInverseFrequencies' and cos/sin are times its attention factor.
/// y may alias x.
void ropeForward(const float *x, float *y, int64_t B, int64_t S, int64_t heads,
                 int64_t headDim, float theta,
                 const int32_t *positions = nullptr,
                 const std::vector<SequenceRun> &runs = {},
                 const RopeScaling &scaling = {});
/// dx = R^T dy (y may alias x in both directions).
void ropeBackward(const float *dy, float *dx, int64_t B, int64_t S,
                  int64_t heads, int64_t headDim, float theta,
                  const int32_t *positions = nullptr,
                  const std::vector<SequenceRun> &runs = {},
                  const RopeScaling &scaling = {});

//===----------------------------------------------------------------------===//
// Causal attention with grouped-query heads
//===----------------------------------------------------------------------===//

/// Query and key rows attention works on at a time: a 64 x 64 tile of
/// scores and a block of one head's rows stay in the L1 and L2 caches.
inline constexpr int64_t kAttentionBlock = 64;

/// The scratch attentionForward (or, with `backward`, attentionBackward)
/// allocates for heads of width headDim on `threads` threads: per thread, a
/// transposed block of keys (and values), a tile of scores (and of their
/// gradients and a transposed copy), the output (or dk and dv) accumulators
/// and row statistics. It does not grow with the sequence.
/// Values of their own width (valueDim, MLA's v_head_dim; -1: headDim)
/// widen the output and dv tiles.
inline uint64_t attentionWorkspaceBytes(int64_t headDim, bool backward,
                                        int threads = 1,
                                        int64_t valueDim = -1) {
  constexpr uint64_t block = kAttentionBlock;
  uint64_t d = static_cast<uint64_t>(headDim);
  uint64_t dv = valueDim < 0 ? d : static_cast<uint64_t>(valueDim);
  uint64_t floats =
      backward ? (d + dv) * block + 3 * block * block + block * (d + dv) + block
               : d * block + block * block + block * dv + 3 * block;
  return floats * sizeof(float) * static_cast<uint64_t>(threads);
}

/// q: [B, S, heads*d], k: [B, S, kvHeads*d], v: [B, S, kvHeads*dv], out:
/// [B, S, heads*dv], lse: [B, heads, S], with d = headDim and dv =
/// valueDim (-1: headDim; MLA's values are narrower than its queries and
/// keys). Scale scaleFactor/sqrt(d) (DeepSeek's YaRN correction; 1 for
/// the plain 1/sqrt(d)); causal. heads % kvHeads == 0. Works on 64 x 64
/// tiles (Attention.cpp); never forms an S x S matrix. With `positions`
/// ([B, S], each token's position in its document, 0 at a document's
/// first token: document masking), query i sees keys [i - positions[b, i],
/// i] only; the positions must be those of contiguous documents
/// (0 <= positions[b, i] <= i, and each one either 0 or the previous + 1).
void attentionForward(const float *q, const float *k, const float *v,
                      float *out, float *lse, int64_t B, int64_t S,
                      int64_t heads, int64_t kvHeads, int64_t headDim,
                      int64_t valueDim = -1,
                      const int32_t *positions = nullptr,
                      float scaleFactor = 1.0f);
/// Gradients w.r.t. q, k and v from dout; recomputes probabilities from lse.
/// dq, dk and dv are overwritten (query heads of a group sum into their
/// shared dk/dv in head order).
void attentionBackward(const float *dout, const float *q, const float *k,
                       const float *v, const float *out, const float *lse,
                       float *dq, float *dk, float *dv, int64_t B, int64_t S,
                       int64_t heads, int64_t kvHeads, int64_t headDim,
                       int64_t valueDim = -1,
                       const int32_t *positions = nullptr,
                      float scaleFactor = 1.0f);

/// Context parallelism's attention after the keys were gathered: this
/// rank's Sq queries ([B, Sq, heads*d]), which `runs` (covering [0, Sq))
/// place in the whole sequence, against all Sk keys and values of the
/// whole sequence ([B, Sk, ...], in sequence order); causal by position in
/// the whole. out and lse as attentionForward's, for the Sq queries. With
/// `positions` ([B, Sq]), a query sees its document's keys only; the first
/// token of a run may be at any position up to its place in the whole.
void attentionBlockForward(const float *q, const float *k, const float *v,
                           float *out, float *lse, int64_t B, int64_t Sq,
                           int64_t Sk, const std::vector<SequenceRun> &runs,
                           int64_t heads, int64_t kvHeads, int64_t headDim,
                           int64_t valueDim = -1,
                           const int32_t *positions = nullptr,
                      float scaleFactor = 1.0f);
/// Its backward: dq for the block's queries, and dk and dv over the whole
/// sequence holding this rank's queries' share (summed over the ranks, the
/// whole gradient). All three are overwritten.
void attentionBlockBackward(const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            float *dq, float *dk, float *dv, int64_t B,
                            int64_t Sq, int64_t Sk,
                            const std::vector<SequenceRun> &runs, int64_t heads,
                            int64_t kvHeads, int64_t headDim,
                            int64_t valueDim = -1,
                            const int32_t *positions = nullptr,
                      float scaleFactor = 1.0f);

/// One step of ring attention (context parallelism): the Sq queries of a
/// chunk of the sequence that starts at `queryStart` against the Sk keys
/// and values of a chunk that starts at `keyStart` (each contiguous,
/// causal by position: query i sees key j when keyStart + j <= queryStart
/// + i), merged into the running `out` ([B, Sq, heads*dv]) and `lse`
/// ([B, heads, Sq]) by the online softmax. Start them with lse = -inf: a
/// query seeing no key yet keeps lse = -inf and its output is the next
/// chunk's. After every chunk the results are attentionForward's on the
/// whole sequence (to rounding). With `positions` ([B, Sq], the queries'
/// positions in their documents, as attentionForward's), a query sees
/// only its own document's keys.
void attentionChunkForward(const float *q, const float *k, const float *v,
                           float *out, float *lse, int64_t B, int64_t Sq,
                           int64_t Sk, int64_t queryStart, int64_t keyStart,
                           int64_t heads, int64_t kvHeads, int64_t headDim,
                           int64_t valueDim = -1,
                           const int32_t *positions = nullptr,
                      float scaleFactor = 1.0f);
/// Its backward for one pair of chunks, from the final out and lse:
/// adds the pair's share to dq ([B, Sq, ...]) and to dk and dv ([B, Sk,
/// ...]), which sum over every chunk pair to attentionBackward's.
void attentionChunkBackward(const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            float *dq, float *dk, float *dv, int64_t B,
                            int64_t Sq, int64_t Sk, int64_t queryStart,
                            int64_t keyStart, int64_t heads, int64_t kvHeads,
                            int64_t headDim, int64_t valueDim = -1,
                            const int32_t *positions = nullptr,
                      float scaleFactor = 1.0f);

/// y[r, h] = (a[r, h], b[r, h]) for `rows` rows of `heads` heads: each
/// head's `aWidth` features of a, then its `bWidth` of b (multi-head latent
/// attention's queries and keys). With `sharedB`, b is one part [rows,
/// bWidth] that every head gets (MLA's RoPE key).
void concatHeads(const float *a, const float *b, float *y, int64_t rows,
                 int64_t heads, int64_t aWidth, int64_t bWidth, bool sharedB);
/// The inverse: a and b from y. With `sharedB`, b is the sum of the heads'
/// parts (in head order; the adjoint of sharing it).
void splitHeads(const float *y, float *a, float *b, int64_t rows, int64_t heads,
                int64_t aWidth, int64_t bWidth, bool sharedB);

//===----------------------------------------------------------------------===//
// Router and experts
//===----------------------------------------------------------------------===//

/// How a router scores, selects and weighs (moe.router; the default is HF
/// Mixtral's: softmax, renormalised, unscaled, one group, no bias).
struct RoutingRule {
  /// Sigmoid scores (DeepSeek-V3) instead of the softmax.
  bool sigmoid = false;
  /// The selected scores divided by their sum (HF's norm_topk_prob).
  bool normalize = true;
  /// The routing weights' factor (routed_scaling_factor).
  float scale = 1.0f;
  /// Group-limited selection: the top-k among the experts of the best
  /// topGroups of `groups` groups of E / groups consecutive ids, a group
  /// scoring its two best. Requires groups to divide E into groups of two
  /// or more, topGroups <= groups, and topK candidates.
  int64_t groups = 1, topGroups = 1;
  /// [E], added to the scores for the selection only; null for none.
  const float *bias = nullptr;
};

/// logits: [T, E] -> probs: [T, E] (the scores), weights: [T, topK],
/// indices: [T, topK] (descending score plus bias, ties to the lower id; -1
/// where dropped by capacity). capacityFactor <= 0: no dropping; otherwise
/// capacity C = ceil(cf * T * topK / E) (evaluated in double) and
/// assignments are admitted slot-major. A dropped slot keeps its weight.
/// Requires 1 <= topK <= E.
void routerForward(const float *logits, float *probs, float *weights,
                   int32_t *indices, int64_t T, int64_t E, int64_t topK,
                   float capacityFactor, const RoutingRule &rule = {});
/// dlogits from the gradient of the routing weights (dweights, [T, topK])
/// and, when non-null, of the scores (dprobs, [T, E]; from the
/// load-balancing loss). The selection is recomputed from probs with the
/// forward's rule, so slots dropped by capacity still name their expert.
/// dlogits is overwritten.
void routerBackward(const float *dweights, const float *dprobs,
                    const float *probs, float *dlogits, int64_t T, int64_t E,
                    int64_t topK, const RoutingRule &rule = {});

/// The number of ids[0, n) equal to each expert e < E (dropped slots, -1,
/// count nowhere).
std::vector<int64_t> expertCounts(const int32_t *ids, int64_t n, int64_t E);
/// load[e] += counts[e]: exact while a count stays below 2^24.
void addExpertCounts(const std::vector<int64_t> &counts, float *load);
/// Ends a step's load (ExpertLoadUpdate): with a bias, DeepSeek-V3's
/// auxiliary-loss-free balancing bias[e] += rate * sign(mean(load) -
/// load[e]) (sign(0) = 0); then load = 0.
void expertLoadUpdate(float *load, float *bias, int64_t E, float rate);

/// One layer's load as the metrics report it: the least and most loaded
/// experts' counts and the coefficient of variation (standard deviation
/// over mean; 0 for no tokens).
struct ExpertLoadStats {
  double min = 0.0, max = 0.0, cv = 0.0;
};
ExpertLoadStats expertLoadStats(const float *load, int64_t E);

/// How the expert GEMMs emulate FP8 (absent: fp32). Every GEMM input is
/// rounded onto the FP8 grid with its own scales, as an FP8 GEMM would read
/// it. Tensorwise (Transformer Engine's hybrid recipe): one scale per GEMM
/// input (per expert) from its current amax, activations and weights in
/// E4M3, gradients in E5M2. Delayed (Transformer Engine's default): the same,
/// with each scale from the input's amax history (quantizeDelayed).
/// Blockwise (DeepSeek-V3's): one scale per 1 x `block` row block of an
/// activation or gradient and per `block` x `block` block of a weight, all
/// in E4M3. None: the GEMMs read full precision; only the token dispatch is
/// FP8 (targets without FP8 tensor cores, such as the A100).
struct Fp8Gemms {
  enum class Scaling : uint8_t {
    None = 0,
    Tensorwise = 1,
    Blockwise = 2,
    Delayed = 3
  };
  Scaling scaling = Scaling::Tensorwise;
  int64_t block = 128;
  /// Expert parallelism: tokens (and their gradients) travel to the
  /// experts as FP8 codes with one scale per `block` elements of a row.
  bool dispatch = false;
  /// Delayed scaling: the amax histories of the experts' GEMM inputs,
  /// [experts, kFp8ExpertRoles, historyLength] (see quantizeDelayed); the
  /// kernels fold this step's amaxes into them.
  float *history = nullptr;
  int64_t historyLength = 0;

  /// Whether the GEMMs read FP8 (not only the dispatch).
  bool roundsGemms() const { return scaling != Scaling::None; }
};

/// The GEMM inputs of one expert that have an amax history under delayed
/// scaling, in the order of the history's second dimension.
enum class Fp8ExpertRole : int64_t {
  Input = 0,          // x, the tokens
  W1,
  W3,
  Activation,         // a = silu(W1 x) * (W3 x)
  W2,
  OutputGrad,         // dy, for da
  WeightedOutputGrad, // w dy, for dW2
  UpGrad,             // du
  GateGrad,           // dg
};
inline constexpr int64_t kFp8ExpertRoles = 9;

/// The format of gradients under `fp8`: E5M2 with per-tensor scales
/// (Transformer Engine's hybrid recipe), E4M3 with block scales, whose fine
/// scales leave E4M3's range enough (DeepSeek-V3's recipe; also the FP8
/// token dispatch of targets without FP8 GEMMs).
inline Fp8Format fp8GradientFormat(const Fp8Gemms &fp8) {
  return fp8.scaling == Fp8Gemms::Scaling::Tensorwise ||
                 fp8.scaling == Fp8Gemms::Scaling::Delayed
             ? Fp8Format::E5M2
             : Fp8Format::E4M3;
}

/// The most scratch memory an Experts (or, with `backward`, ExpertsGrad)
/// instruction allocates for `rows` tokens of width H through experts of
/// width F on `threads` threads: every slot's output (or input-gradient)
/// row, the gathered rows and up projections of at most `rows` rows at
/// once (one expert may receive every token; experts that run side by side
/// hold a thread's share each), the routing tables and, with `fp8`, each
/// thread's rounded weights. Expert parallel over `groupSize` ranks, an
/// expert may receive every slot of the group, and the rows travel through
/// exchange buffers. The compiler and the runtime count it in a rank's
/// memory.
inline uint64_t expertsWorkspaceBytes(int64_t rows, int64_t topK, int64_t H,
                                      int64_t F, bool backward, bool fp8,
                                      int64_t groupSize = 1, int threads = 1) {
  uint64_t exchange = 0;
  if (groupSize > 1) {
    int64_t slots = rows * topK;
    rows = slots * groupSize; // rows arriving, one slot each
    topK = 1;
    // Rows leaving and arriving, outputs and the rows coming back; the
    // backward's carry dy and a weight, and come back with dx and dweight.
    exchange = (backward ? 8 : 4) * static_cast<uint64_t>(slots + rows) *
               (H + 1) * sizeof(float);
  }
  uint64_t floats = rows * topK * H +
                    (backward ? rows * (2 * H + 4 * F) : rows * (H + 2 * F));
  if (fp8)
    floats += 3 * F * H * static_cast<uint64_t>(threads);
  // Slots by expert, expert offsets, and each slot's place among them.
  uint64_t routing = (2 * rows * topK + rows + 1) * sizeof(int64_t);
  return floats * sizeof(float) + routing + exchange;
}

/// x: [T, H], weights/indices: [T, topK], w1, w3: [E, F, H], w2: [E, H, F],
/// y: [T, H]. Tokens are grouped by expert so each expert runs as one GEMM.
/// Slots whose index is outside [0, E) (capacity drops are -1) contribute
/// nothing. Expert outputs are added into y in expert order, token order
/// within an expert (HF's index_add_ order).
/// With `bf16Rows` (mixed precision: y is a BF16 buffer), each assignment's
/// expert output is rounded to BF16 before it is weighted and added in fp32,
/// as the BF16 rows an expert all-to-all brings back (docs/precision.md).
/// With `hidden` [T, topK, 2, F], also writes each slot's W1 x and W3 x
/// there as the GEMMs computed them (zeros for a dropped slot), for the
/// backward to read.
void expertsForward(const float *x, const float *weights,
                    const int32_t *indices, const float *w1, const float *w3,
                    const float *w2, float *y, int64_t T, int64_t H, int64_t F,
                    int64_t E, int64_t topK, const Fp8Gemms *fp8 = nullptr,
                    bool bf16Rows = false, float *hidden = nullptr);
/// Overwrites dx [T, H], dweights [T, topK] (0 for skipped slots) and dw1,
/// dw3 [E, F, H], dw2 [E, H, F] (0 for experts that received no token).
/// Reads W1 x and W3 x from the forward's `hidden` when given, else
/// recomputes them per expert; with `fp8`, from the same FP8 values the
/// forward read, so both give the same bits. With `bf16Rows`
/// (dx is a BF16 buffer), each assignment's input gradient is rounded to
/// BF16 before the token's are added in fp32.
void expertsBackward(const float *dy, const float *x, const float *weights,
                     const int32_t *indices, const float *w1, const float *w3,
                     const float *w2, float *dx, float *dweights, float *dw1,
                     float *dw3, float *dw2, int64_t T, int64_t H, int64_t F,
                     int64_t E, int64_t topK, const Fp8Gemms *fp8 = nullptr,
                     bool bf16Rows = false, const float *hidden = nullptr);

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// Mean cross-entropy over targets >= 0 (0 when there are none). Targets
/// >= V have no logit and are skipped like negative ones; the executor
/// rejects them before the call (checkTargets in
/// lib/Runtime/Engine/Dispatch.cpp).
float crossEntropyForward(const float *logits, const int32_t *targets,
                          int64_t T, int64_t V);
/// dlogits = (dloss / N) (softmax - onehot) on counted rows, 0 elsewhere.
void crossEntropyBackward(float dloss, const float *logits,
                          const int32_t *targets, float *dlogits, int64_t T,
                          int64_t V);

// Tokens split over ranks: each rank reduces its rows to sums and counts,
// the executor adds those over the ranks, and the mean (or its gradient) is
// formed from the totals. On one rank these compose to exactly (bitwise)
// the functions above.

/// The parts of the mean cross-entropy: the sum over counted rows of
/// -log softmax(logits)[target] (in double) and the number of counted rows.
struct CrossEntropySums {
  double sum = 0.0;
  int64_t count = 0;
};
CrossEntropySums crossEntropySums(const float *logits, const int32_t *targets,
                                  int64_t T, int64_t V);
/// The mean from (possibly summed) parts: sum / count, 0 when count is 0.
float crossEntropyMean(const CrossEntropySums &sums);
/// The number of targets in [0, V) among T.
int64_t crossEntropyCount(const int32_t *targets, int64_t T, int64_t V);
/// crossEntropyBackward with the divisor N given: the count of counted
/// targets over all ranks (0: dlogits is all zeros).
void crossEntropyBackward(float dloss, const float *logits,
                          const int32_t *targets, float *dlogits, int64_t T,
                          int64_t V, int64_t count);

// The LM head fused with the mean cross-entropy (moe.linear_cross_entropy,
// LinearCrossEntropy.cpp): logits = x w^T computed one block of vocabulary at
// a time, so that the [T, V] logits and their gradient never exist whole.
// Rows are ignored as in crossEntropySums (targets outside [0, V)).

/// The scratch that bounds a block of logits: 8 MiB.
inline constexpr uint64_t kLinearCrossEntropyBlockBytes = uint64_t{8} << 20;
/// The vocabulary block the fused LM head + cross-entropy computes at once
/// for T rows: all of V when T * V floats fit kLinearCrossEntropyBlockBytes
/// (8 MiB), else the most columns that fit, a multiple of 64, at least 64
/// (and at most V). Inline: the compiler's memory plan uses it too.
inline int64_t linearCrossEntropyBlock(int64_t T, int64_t V) {
  constexpr uint64_t budget = kLinearCrossEntropyBlockBytes / sizeof(float);
  // Whole register tiles of the GEMM kernels (Linear.cpp cuts on multiples
  // of 16), and never narrower, so a huge T cannot make the GEMMs too thin
  // to run at speed.
  constexpr int64_t align = 64;
  if (T <= 0 || static_cast<uint64_t>(T) * static_cast<uint64_t>(V) <= budget)
    return V;
  int64_t columns =
      static_cast<int64_t>(budget / static_cast<uint64_t>(T)) / align * align;
  return std::min(V, std::max(align, columns));
}
/// Its scratch: T * linearCrossEntropyBlock(T, V) floats, in bytes.
inline uint64_t linearCrossEntropyWorkspaceBytes(int64_t T, int64_t V) {
  return static_cast<uint64_t>(T) *
         static_cast<uint64_t>(linearCrossEntropyBlock(T, V)) * sizeof(float);
}

/// Forward of moe.linear_cross_entropy: logits = x w^T ([T, H] by [V, H]),
/// block of vocabulary by block, with an online log-sum-exp per row (running
/// float max and double sum, as crossEntropySums' log-sum-exp: with one block
/// it is that value exactly). Writes lse[t] (as float) for every row, counted
/// or not, and returns the double sum over counted rows of
/// lse - logits[t, target] and their count (with a single block: bitwise
/// crossEntropySums of the unfused logits from
/// detail::gemm(false, true, T, V, H, 1, x, H, w, H, 0, logits, V)).
/// `vocabBlock` 0 means linearCrossEntropyBlock(T, V); tests pass a small one.
CrossEntropySums linearCrossEntropySums(const float *x, const float *w,
                                        const int32_t *targets, float *lse,
                                        int64_t T, int64_t H, int64_t V,
                                        int64_t vocabBlock = 0);
/// Backward: recomputes each logits block, g = dloss / count *
/// (exp(logit - lse) - onehot(target)) on counted rows (0 on others), and
/// writes dw[v0:v1] = g^T x for the block (each row of dw once, no
/// accumulation) and dx = sum over blocks of g w[v0:v1] (the first block
/// overwrites dx, later ones add, in block order). With one block g is
/// crossEntropyBackward's dlogits but for lse, which arrives rounded to
/// float where crossEntropyBackward recomputes it in double: each element's
/// probability differs by a relative |lse| * 2^-24 at most (one rounding).
/// count 0 gives zero dx and dw.
void linearCrossEntropyBackward(float dloss, const float *x, const float *w,
                                const int32_t *targets, const float *lse,
                                float *dx, float *dw, int64_t T, int64_t H,
                                int64_t V, int64_t count,
                                int64_t vocabBlock = 0);

/// Switch/HF load-balancing loss of one layer from its router probabilities;
/// the top-k selection is recomputed from probs (before any capacity drop).
float auxLossForward(const float *probs, int64_t T, int64_t E, int64_t topK);
/// dprobs[t, e] = dloss * E * count[e] / T^2 (overwritten; count is treated
/// as a constant).
void auxLossBackward(float dloss, const float *probs, float *dprobs, int64_t T,
                     int64_t E, int64_t topK);

/// What the load-balancing loss needs from a set of tokens: count[e] top-k
/// selections of expert e, probSum[e] = sum over tokens of p[t, e] (double,
/// in token order) and the number of tokens. Sums of these over disjoint
/// token sets are the statistics of their union.
struct AuxLossStatistics {
  std::vector<int64_t> count;
  std::vector<double> probSum;
  int64_t tokens = 0;
};
AuxLossStatistics auxLossStatistics(const float *probs, int64_t T, int64_t E,
                                    int64_t topK);
/// E * sum_e (count[e] / T) * (probSum[e] / T) with T = stats.tokens; 0 when
/// there are no tokens.
float auxLossFromStatistics(const AuxLossStatistics &stats);
/// dprobs[t, e] = dloss * E * count[e] / T^2 for the T rows of this rank,
/// with count and T from `stats` (all ranks' tokens). Overwritten; nothing
/// is written when stats.tokens is 0.
void auxLossBackward(float dloss, const AuxLossStatistics &stats, float *dprobs,
                     int64_t T);

/// What DeepSeek-V3's sequence-wise balance loss needs from B sequences of
/// S tokens each (one rank's share of their tokens): per sequence b and
/// expert e, count[b * E + e] assignments the router admitted (indices
/// [B, S, K], -1 for a dropped slot, counted nowhere) and scoreSum[b * E +
/// e] = sum over the tokens of p[t, e] / (sum_j p[t, j] + 1e-20) (double,
/// in token order), and the tokens per sequence. Sums of these over the
/// ranks that split the same sequences' tokens are the whole sequences'.
struct SequenceAuxStatistics {
  int64_t experts = 0, slots = 0, tokensPerSequence = 0;
  std::vector<int64_t> count;
  std::vector<double> scoreSum;
};
SequenceAuxStatistics sequenceAuxStatistics(const float *probs,
                                            const int32_t *indices, int64_t B,
                                            int64_t S, int64_t E, int64_t K);
/// sum_b L_b (double) over the statistics' sequences, L_b = sum_e (E /
/// (K * S)) count[b, e] * scoreSum[b, e] / S with S the tokens per
/// sequence; 0 without tokens.
double sequenceAuxLossSum(const SequenceAuxStatistics &stats);
/// dprobs[b, s, e] = dloss / sequences * (g[b, e] - sum_j g[b, j] q[s, j])
/// / (Z[s] + 1e-20), g[b, e] = E * count[b, e] / (K * S^2), for this rank's
/// [B, S_local, E] probs; `sequences` is the loss's mean's count (all
/// ranks'). Overwritten; zeros without tokens.
void sequenceAuxLossBackward(float dloss, int64_t sequences,
                             const SequenceAuxStatistics &stats,
                             const float *probs, float *dprobs,
                             int64_t localTokens);

/// The router z-loss's sum over T tokens of (log sum_e exp logits[t, e])^2
/// (double, in token order) and T.
struct ZLossSums {
  double sum = 0.0;
  int64_t count = 0;
};
ZLossSums zLossSums(const float *logits, int64_t T, int64_t E);
/// dlogits[t, e] = dloss * 2 * lse[t] * softmax(logits[t])[e] / count over
/// this rank's T rows (count: all ranks' tokens; 0 gives zeros).
void zLossBackward(float dloss, const float *logits, float *dlogits, int64_t T,
                   int64_t E, int64_t count);

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// Sum of squares of n values, accumulated in double for reproducibility.
double sumOfSquares(const float *g, int64_t n);
/// sums[i] = sumOfSquares(g[i], n[i]) for i < count, the tensors spread
/// over the kernels' threads.
void sumsOfSquares(const float *const *g, const int64_t *n, int64_t count,
                   double *sums);
/// Warmup + cosine learning rate for 0-based step (docs/semantics.md).
float learningRate(int64_t step, float peak, float min, int64_t warmup,
                   int64_t decay);
/// One AdamW update of n elements at 0-based step (bias correction uses
/// step + 1). weightDecay is applied as p -= lr * weightDecay * p (pass 0 for
/// norm weights). Element arithmetic is fp32, bias corrections double. The
/// gradient used is grad * gradScale (the clipping coefficient; grad itself
/// is not written).
void adamw(float *param, const float *grad, float *expAvg, float *expAvgSq,
           int64_t n, float lr, float beta1, float beta2, float eps,
           float weightDecay, int64_t step, float gradScale = 1.0f);

//===----------------------------------------------------------------------===//
// Initialisation
//===----------------------------------------------------------------------===//

/// 64-bit FNV-1a of a parameter name (io::fnv1a64); the stream id of its
/// random numbers, so it defines the initial weights.
uint64_t nameHash(const char *name);
/// Fills n values of a parameter with normal(0, std) draws where element i
/// (global index, so shards agree) depends only on (seed, stream, i): a
/// SplitMix64 hash of the counter gives two uniforms and one Box-Muller draw
/// (the exact recipe is spelled out in lib/Runtime/Cpu/Init.cpp).
void initNormal(float *x, int64_t n, float std, uint64_t seed, uint64_t stream,
                int64_t firstIndex = 0);
void fill(float *x, float value, int64_t n);

} // namespace moe::rt::cpu

#endif // MOE_RUNTIME_CPU_KERNELS_H
