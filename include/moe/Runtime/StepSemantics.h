//===- StepSemantics.h - the scalar rules of a step, written once -*- C++ -*-===//
//
// The scalar parts of a training step that every backend must compute the
// same way, bit for bit: the clipping coefficient, the weighted sum of the
// loss terms, the global norm from its sums of squares, the losses from
// their sums and statistics, and the FP8 scale and amax-history rules. The
// CPU kernels and dispatch and the CUDA kernels and host code call these, so
// the two cannot drift.
//
// Each is `__host__ __device__` under nvcc (MOE_HOST_DEVICE) and plain
// inline C++ otherwise; they use only arithmetic both compilers evaluate
// alike (no library calls whose device version may round differently, and
// nothing an FMA could contract: each rounds after every operation).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_STEPSEMANTICS_H
#define MOE_RUNTIME_STEPSEMANTICS_H

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif

namespace moe::rt::semantics {

/// Whether `x` is neither infinite nor NaN (x - x is NaN for both).
MOE_HOST_DEVICE inline bool isFinite(float x) { return x - x == 0.0f; }

/// PyTorch's clip_grad_norm_: min(1, max_norm / (norm + 1e-6)) in fp32;
/// max_norm <= 0 disables clipping.
MOE_HOST_DEVICE inline float clipCoefficient(float maxNorm, float norm) {
  if (!(maxNorm > 0.0f))
    return 1.0f;
  float coefficient = maxNorm / (norm + 1e-6f);
  return coefficient < 1.0f ? coefficient : 1.0f;
}

/// sum_i weights[i] * values[i], each product and the sum in double, in
/// operand order, then stored as fp32 (the loss = ce + sum of aux terms).
MOE_HOST_DEVICE inline float weightedSum(const float *weights,
                                         const float *values, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double term = static_cast<double>(weights[i]) * values[i];
    sum += term;
  }
  return static_cast<float>(sum);
}

/// The global norm from each operand's sum of squares (already summed over
/// the ranks and pipeline stages holding its blocks): added in operand
/// order in double, then the square root, stored as fp32.
MOE_HOST_DEVICE inline float normFromSquares(const double *squares,
                                             size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i)
    sum += squares[i];
  return static_cast<float>(sqrt(sum));
}

/// The cross-entropy mean from its (possibly summed) parts: sum / count in
/// double, stored as fp32; 0 when no target was counted.
MOE_HOST_DEVICE inline float crossEntropyMean(double sum, int64_t count) {
  return count == 0 ? 0.0f
                    : static_cast<float>(sum / static_cast<double>(count));
}

/// The load-balancing loss from its statistics over `tokens` tokens:
/// E * sum_e (count[e] / tokens) * (probSum[e] / tokens), in double in
/// expert order; 0 without tokens. `Count` is the counts' integer type
/// (the host's int64_t, the GPU's unsigned long long).
template <typename Count>
MOE_HOST_DEVICE inline float auxLossFromStatistics(const Count *count,
                                                   const double *probSum,
                                                   int64_t E, int64_t tokens) {
  if (tokens <= 0)
    return 0.0f;
  double n = static_cast<double>(tokens);
  double loss = 0.0;
  for (int64_t e = 0; e < E; ++e)
    loss += static_cast<double>(count[e]) / n * (probSum[e] / n);
  return static_cast<float>(static_cast<double>(E) * loss);
}

/// The largest magnitude of x[0, n) (0 for none), or the first NaN met:
/// the amax an FP8 scale is made from, per tensor, block or row.
MOE_HOST_DEVICE inline float absMax(const float *x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    if (v != v)
      return v;
    float magnitude = v < 0.0f ? -v : v;
    amax = magnitude > amax ? magnitude : amax;
  }
  return amax;
}

/// The largest finite value of the FP8 formats (cpu::Fp8Format order):
/// E4M3, E5M2.
MOE_HOST_DEVICE inline float fp8MaxFinite(int format) {
  return format == 0 ? 448.0f : 57344.0f;
}

/// The scale mapping `amax` onto the format's largest finite value
/// (Transformer Engine's, with no margin): maxFinite / amax; 1 for amax 0
/// and for a non-finite amax (the values are then not finite either); the
/// largest float where a tiny amax would overflow it (the values are then
/// all exactly representable after any scale that keeps them finite).
MOE_HOST_DEVICE inline float fp8Scale(float amax, float maxFinite) {
  if (!(amax > 0.0f) || !isFinite(amax))
    return 1.0f;
  float scale = maxFinite / amax;
  return isFinite(scale) ? scale : FLT_MAX;
}

/// Delayed scaling: the amax a step scales by, the largest of the history's
/// past steps (slots 1 to length - 1) when one is positive, else this
/// step's `now`.
MOE_HOST_DEVICE inline float delayedAmax(const float *history, int64_t length,
                                         float now) {
  float past = 0.0f;
  for (int64_t i = 1; i < length; ++i)
    past = past < history[i] ? history[i] : past;
  return past > 0.0f ? past : now;
}

/// Folds this step's amax `now` into slot 0 of a history: the larger, and a
/// NaN stays (the history then says the step went wrong, and the NaN check
/// of the loss names the step).
MOE_HOST_DEVICE inline void recordAmax(float *history, float now) {
  if (!(now <= history[0]))
    history[0] = now;
}

/// Ends a step of a history of `length` slots: every slot moves one on
/// (the oldest drops out) and slot 0 starts the next step at 0. A history
/// of one slot has nothing to move and keeps its value.
MOE_HOST_DEVICE inline void rollAmaxHistory(float *history, int64_t length) {
  if (length < 2)
    return;
  for (int64_t i = length - 1; i > 0; --i)
    history[i] = history[i - 1];
  history[0] = 0.0f;
}

/// A collective's layout around dimension `dim` of one rank's block: the
/// whole tensor is [outer, parts, chunk], outer the product of the block's
/// dimensions before `dim`, chunk that of the others; rank r's block is the
/// chunks [o, r, :] for every o. With outer = 1 the blocks are contiguous.
/// A strided collective packs them into [parts, outer, chunk].
struct CollectiveBlocks {
  int64_t outer = 1, chunk = 1;
};

MOE_HOST_DEVICE inline CollectiveBlocks
blocksAround(const int64_t *block, int64_t rank, int64_t dim) {
  CollectiveBlocks blocks;
  for (int64_t d = 0; d < rank; ++d)
    (d < dim ? blocks.outer : blocks.chunk) *= block[d];
  return blocks;
}

/// Where chunk (o, r) starts, in elements, in the [outer, parts, chunk]
/// tensor and in its [parts, outer, chunk] packing.
MOE_HOST_DEVICE inline int64_t stridedOffset(const CollectiveBlocks &blocks,
                                             int64_t parts, int64_t o,
                                             int64_t r) {
  return (o * parts + r) * blocks.chunk;
}
MOE_HOST_DEVICE inline int64_t packedOffset(const CollectiveBlocks &blocks,
                                            int64_t o, int64_t r) {
  return r * (blocks.outer * blocks.chunk) + o * blocks.chunk;
}

/// Context parallelism's load-balanced split of a sequence (Megatron's and
/// TorchTitan's): the whole dimension of `whole` elements is cut into 2 cp
/// chunks, and cp rank c holds chunks c and 2 cp - 1 - c, in that order,
/// so every rank gets as much of the causal mask's work. A split over axes
/// that cp leads is this split, the axes after cp cutting each rank's pair
/// of chunks contiguously: block g of `parts` (the row-major index over
/// the axes) is part g % (parts / cp) of cp rank g / (parts / cp)'s pair.
/// The block's elements are at most two runs of the whole: `local[i]` of
/// the block is `whole[i]` of the sequence, for `length[i]` elements.
/// Requires whole % (2 cp) == 0 and whole % parts == 0.
struct SequenceRuns {
  int count = 0;
  int64_t local[2] = {0, 0}, whole[2] = {0, 0}, length[2] = {0, 0};
};

MOE_HOST_DEVICE inline SequenceRuns balancedRuns(int64_t whole, int64_t cp,
                                                 int64_t parts, int64_t g) {
  SequenceRuns runs;
  int64_t inner = parts / cp, c = g / inner, t = g % inner;
  int64_t chunk = whole / (2 * cp), width = whole / parts;
  // The block is [begin, end) of the pair: chunk c, then chunk 2 cp - 1 - c.
  int64_t begin = t * width, end = begin + width;
  for (int64_t half = 0; half < 2; ++half) {
    int64_t from = begin > half * chunk ? begin : half * chunk;
    int64_t to = end < (half + 1) * chunk ? end : (half + 1) * chunk;
    if (from >= to)
      continue;
    int64_t owner = half == 0 ? c : 2 * cp - 1 - c;
    runs.local[runs.count] = from - begin;
    runs.whole[runs.count] = owner * chunk + (from - half * chunk);
    runs.length[runs.count] = to - from;
    ++runs.count;
  }
  return runs;
}

/// Block g of `parts` along a dimension of `whole` elements: the
/// load-balanced split when cp > 1 leads its axes, else the g-th
/// contiguous block (one run).
MOE_HOST_DEVICE inline SequenceRuns blockRuns(int64_t whole, int64_t cp,
                                              int64_t parts, int64_t g) {
  if (cp > 1)
    return balancedRuns(whole, cp, parts, g);
  SequenceRuns runs;
  runs.count = 1;
  runs.length[0] = whole / parts;
  runs.whole[0] = g * runs.length[0];
  return runs;
}

} // namespace moe::rt::semantics

#endif // MOE_RUNTIME_STEPSEMANTICS_H
