//===- WeightGradBlocks.h - deterministic weight-gradient sums -*- C++ -*-===//
//
// The bodies of the kernels that sum a weight's gradient over every token
// (the embedding table's, RMSNorm's weight's), written against the Simt
// interface of FlashAttentionBlocks.h so they run on the device
// (Embedding.cu, RmsNorm.cu) and under the CPU emulation of thread blocks
// (unittests/Cuda/WeightGradEmulationTest.cpp).
//
// Both add in an order fixed by the shapes alone, so a run gives the same
// bits as any other; neither uses atomics. They replace kernels with one
// thread per column walking all T tokens, which kept H / 256 blocks (8 SMs
// at H = 2048) busy for the whole sum.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_WEIGHTGRADBLOCKS_H
#define MOE_LIB_RUNTIME_CUDA_WEIGHTGRADBLOCKS_H

#include "FlashAttentionBlocks.h"

namespace moe::rt::cuda::weightgrad {

/// Threads of a block, each owning one column of the gradient.
inline constexpr int kColumns = 256;

/// The embedding table's gradient, dtable[id, c] += dy[t, c] for every
/// token t with id = tokens[t] in [0, V), in token order: each element's
/// sum is the CPU's, bit for bit. dtable starts zeroed. The ids are split
/// into `parts` residue classes (id mod parts), one per blockY(), so that
/// H / kColumns * parts blocks share the work; blockX() is the column tile.
/// Tokens are staged in shared memory (kTokenChunk int32 at a time).
template <typename S> struct EmbeddingGradArgs {
  /// Float, or BF16 bits (mixed precision's activations).
  const S *dy;
  const int32_t *tokens;
  float *dtable;
  int64_t T, V, H, parts;
};

inline constexpr int kTokenChunk = 1024;
inline constexpr size_t kEmbeddingGradSharedBytes = kTokenChunk * 4;

template <typename Simt, typename S>
MOE_SIMT_FN void embeddingGradBlock(const Simt &simt,
                                    const EmbeddingGradArgs<S> &args) {
  int32_t *tokens = reinterpret_cast<int32_t *>(simt.shared());
  int64_t c = simt.blockX() * kColumns + simt.thread();
  int64_t part = simt.blockY();
  for (int64_t first = 0; first < args.T; first += kTokenChunk) {
    int64_t count = args.T - first < kTokenChunk ? args.T - first : kTokenChunk;
    for (int64_t i = simt.thread(); i < count; i += kColumns)
      tokens[i] = args.tokens[first + i];
    simt.syncThreads();
    if (c < args.H)
      for (int64_t i = 0; i < count; ++i) {
        int64_t id = tokens[i];
        if (id >= 0 && id < args.V && id % args.parts == part)
          args.dtable[id * args.H + c] +=
              simt.value(args.dy + (first + i) * args.H + c);
      }
    // The chunk is overwritten next.
    simt.syncThreads();
  }
}

/// RMSNorm's weight gradient, dw[c] = sum over t of dy[t, c] (x[t, c]
/// r[t]), in two stages: blockY() sums the rows of its chunk of
/// kRowsPerChunk in order into partials[chunk, c] (double, as the CPU);
/// then each column adds its chunks' partials in chunk order. The chunks
/// depend on T alone. (The CPU adds all rows in one sequence; the double
/// sums then round to the same float but for rare ties.)
template <typename S> struct RmsNormWeightGradArgs {
  /// Float, or BF16 bits (mixed precision's activations).
  const S *dy, *x;
  const float *reciprocals;
  double *partials;
  float *dw;
  int64_t T, H;
};

inline constexpr int64_t kRowsPerChunk = 128;

MOE_SIMT_SHAPE_FN int64_t rowChunks(int64_t T) {
  return (T + kRowsPerChunk - 1) / kRowsPerChunk;
}

template <typename Simt, typename S>
MOE_SIMT_FN void
rmsNormWeightPartialsBlock(const Simt &simt,
                           const RmsNormWeightGradArgs<S> &args) {
  int64_t c = simt.blockX() * kColumns + simt.thread();
  int64_t chunk = simt.blockY();
  if (c >= args.H)
    return;
  int64_t end = (chunk + 1) * kRowsPerChunk;
  end = end < args.T ? end : args.T;
  double sum = 0.0;
  for (int64_t t = chunk * kRowsPerChunk; t < end; ++t) {
    float xhat = simt.value(args.x + t * args.H + c) * args.reciprocals[t];
    sum += static_cast<double>(simt.value(args.dy + t * args.H + c)) * xhat;
  }
  args.partials[chunk * args.H + c] = sum;
}

template <typename Simt, typename S>
MOE_SIMT_FN void rmsNormWeightSumBlock(const Simt &simt,
                                       const RmsNormWeightGradArgs<S> &args) {
  int64_t c = simt.blockX() * kColumns + simt.thread();
  if (c >= args.H)
    return;
  double sum = 0.0;
  for (int64_t chunk = 0; chunk < rowChunks(args.T); ++chunk)
    sum += args.partials[chunk * args.H + c];
  args.dw[c] = static_cast<float>(sum);
}

} // namespace moe::rt::cuda::weightgrad

#endif // MOE_LIB_RUNTIME_CUDA_WEIGHTGRADBLOCKS_H
