//===- Losses.cu - Cross-entropy and the load-balancing loss --------------===//
//
// Cross-entropy runs one block per row (rows stride over a capped grid):
// a block-wide float maximum, then the sum of exp(x - max) in double, as
// cpu's logSumExp. The sums kernel keeps its rows' losses and count in
// thread 0 and writes one partial loss per block, which a second kernel adds
// in a fixed order (the same on every run; the order of the row sums
// differs from the CPU's: results agree to rounding).
//
// The load-balancing statistics recompute each token's top-k with the CPU
// router's exact rule (strictly greater wins, scanning ids upwards, so ties
// go to the lower id), one thread per token, counting selections in a
// shared histogram. probSum is one block per expert summing its column over
// the tokens: deterministic, and no atomics on doubles.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "BlockReduce.cuh"
#include "DeviceBuffer.h"
#include "Launch.h"
#include "PartialSums.cuh"
#include "SharedMemory.cuh"
#include "Storage.cuh"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>

namespace moe::rt::cuda {
namespace {

/// The most experts auxLossStatistics handles: its histogram lives in
/// shared memory and each token's selection mask in 32 words.
constexpr int64_t kMaxExperts = 1024;

/// Blocks for a kernel that gives each row a block: enough to fill a large
/// GPU, and rows beyond the grid are taken by the same blocks in turn.
unsigned blocksForRows(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 65535));
}

/// Targets outside [0, V) are not counted, as cpu's isCounted: negative
/// ones by definition (HF's -100), ids >= V because they have no logit.
__device__ bool isCounted(int32_t target, int64_t V) {
  return target >= 0 && target < V;
}

// Tree reductions over the block (blockDim.x == kThreads, a power of two).
// Every thread of the block must call them; they end with a barrier so the
// caller may reuse `shared` at once.

/// log sum_v exp(x[v]) of one row, as cpu's logSumExp: the maximum in
/// float, the sum of exp(double(x) - max) in double. Called by the whole
/// block; every thread gets the result.
template <typename S>
__device__ double rowLogSumExp(const S *x, int64_t V, float *sharedMax,
                               double *sharedSum) {
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    m = fmaxf(m, loadValue(x + v));
  m = blockMax(m, sharedMax);
  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    sum += exp(static_cast<double>(loadValue(x + v)) - static_cast<double>(m));
  sum = blockSum(sum, sharedSum);
  return static_cast<double>(m) + log(sum);
}

// S: the logits' (and their gradient's) storage, float or BF16 bits.
template <typename S>
__global__ void crossEntropySumsKernel(const S *logits, const int32_t *targets,
                                       int64_t T, int64_t V, double *partials,
                                       unsigned long long *count) {
  MOE_BLOCK_SHARED(float, sharedMax, kThreads);
  MOE_BLOCK_SHARED(double, sharedSum, kThreads);
  // Only thread 0's copies are used.
  double blockLoss = 0.0;
  unsigned long long blockRows = 0;
  for (int64_t row = blockIdx.x; row < T; row += gridDim.x) {
    int32_t target = targets[row];
    // The same for every thread of the block: the barriers inside
    // rowLogSumExp are reached by all or by none.
    if (!isCounted(target, V))
      continue;
    const S *x = logits + row * V;
    double lse = rowLogSumExp(x, V, sharedMax, sharedSum);
    if (threadIdx.x == 0) {
      blockLoss += lse - static_cast<double>(loadValue(x + target));
      ++blockRows;
    }
  }
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = blockLoss;
    // Integers add exactly in any order.
    if (blockRows > 0)
      atomicAdd(count, blockRows);
  }
}

/// coefficient = dloss / count in double as the CPU computes it (0 when
/// count is 0), from the device scalars *dloss and *count.
template <typename S>
__global__ void crossEntropyBackwardKernel(const float *dloss,
                                           const unsigned long long *count,
                                           const S *logits,
                                           const int32_t *targets, S *dlogits,
                                           int64_t T, int64_t V) {
  MOE_BLOCK_SHARED(float, sharedMax, kThreads);
  MOE_BLOCK_SHARED(double, sharedSum, kThreads);
  unsigned long long n = *count;
  double coefficient =
      n == 0 ? 0.0 : static_cast<double>(*dloss) / static_cast<double>(n);
  float coefficientF = static_cast<float>(coefficient);
  for (int64_t row = blockIdx.x; row < T; row += gridDim.x) {
    int32_t target = targets[row];
    S *g = dlogits + row * V;
    if (!isCounted(target, V)) {
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        storeValue(g + v, 0.0f);
      continue;
    }
    const S *x = logits + row * V;
    double lse = rowLogSumExp(x, V, sharedMax, sharedSum);
    // Each element is written by the thread that reads it, after the whole
    // row has been read for lse: in-place (dlogits == logits) works too.
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      float value = static_cast<float>(
          coefficient * exp(static_cast<double>(loadValue(x + v)) - lse));
      // The CPU subtracts the one-hot in fp32 after rounding the softmax
      // term; the same thread does it here, so there is no second write.
      if (v == target)
        value -= coefficientF;
      storeValue(g + v, value);
    }
  }
}

/// Calls visit(e) for the topK experts of the row p[0, E) in the order of
/// cpu's detail::selectTopK, with its exact comparisons (strictly greater
/// wins, ids ascending), so even NaN probabilities select what the CPU
/// selects. Requires 1 <= topK <= E <= kMaxExperts.
template <typename Visit>
__device__ void selectTopK(const float *p, int64_t E, int64_t topK,
                           Visit visit) {
  uint32_t taken[kMaxExperts / 32];
  for (int64_t w = 0; w < kMaxExperts / 32; ++w)
    taken[w] = 0;
  for (int64_t j = 0; j < topK; ++j) {
    int64_t best = -1;
    float bestValue = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[e / 32] & (1u << (e % 32)))
        continue;
      float value = p[e];
      if (best < 0 || value > bestValue) {
        best = e;
        bestValue = value;
      }
    }
    // topK <= E leaves an expert untaken in every round: best >= 0.
    taken[best / 32] |= 1u << (best % 32);
    visit(best);
  }
}

/// count[e] += top-k selections of e over the tokens (count zeroed before).
__global__ void auxLossCountKernel(const float *probs, int64_t T, int64_t E,
                                   int64_t topK, unsigned long long *count) {
  MOE_BLOCK_SHARED(unsigned long long, histogram, kMaxExperts);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
    histogram[e] = 0;
  __syncthreads();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < T;
       t += int64_t(blockDim.x) * gridDim.x)
    selectTopK(probs + t * E, E, topK, [&](int64_t e) {
      atomicAdd(&histogram[e], 1ull);
    });
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
    if (histogram[e] != 0)
      atomicAdd(&count[e], histogram[e]);
}

/// probSum[e] = sum over t of probs[t, e] in double; block e (gridDim.x ==
/// E) sums column e, so no zeroing and no atomics.
__global__ void auxLossProbSumKernel(const float *probs, int64_t T, int64_t E,
                                     double *probSum) {
  MOE_BLOCK_SHARED(double, shared, kThreads);
  int64_t e = blockIdx.x;
  double sum = 0.0;
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
    sum += static_cast<double>(probs[t * E + e]);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    probSum[e] = sum;
}

__global__ void auxLossBackwardKernel(const float *dlossOnDevice,
                                      const unsigned long long *count,
                                      double tokensSquared, float *dprobs,
                                      int64_t T, int64_t E) {
  float dloss = *dlossOnDevice;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * E;
       i += int64_t(blockDim.x) * gridDim.x) {
    // cpu::auxLossBackward's order: ((dloss * E) * count) / tokens^2.
    double value = static_cast<double>(dloss) * static_cast<double>(E) *
                   static_cast<double>(count[i % E]) / tokensSquared;
    dprobs[i] = static_cast<float>(value);
  }
}

absl::Status checkNonNegative(const char *function, const char *what,
                              int64_t value) {
  if (value < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", what, " must be >= 0, found ", value));
  return absl::OkStatus();
}

template <typename S>
absl::Status crossEntropySumsOn(const S *logits, const int32_t *targets,
                                int64_t T, int64_t V, double *sum,
                                unsigned long long *count,
                                cudaStream_t stream) {
  if (absl::Status status = checkNonNegative("crossEntropySums", "T", T);
      !status.ok())
    return status;
  if (absl::Status status = checkNonNegative("crossEntropySums", "V", V);
      !status.ok())
    return status;
  if (T == 0)
    return absl::OkStatus();
  unsigned blocks = blocksForRows(T);
  MOE_DEVICE_BUFFER(double, partials, blocks, stream);
  MOE_CUDA_TRY(launch("crossEntropySums", crossEntropySumsKernel<S>, blocks,
                      kThreads, 0, stream, logits, targets, T, V,
                      partials.get(), count));
  return launch("crossEntropySums (partials)", addPartialsKernel, 1, kThreads,
                0, stream, partials.get(), blocks, sum);
}

template <typename S>
absl::Status crossEntropyBackwardOn(const float *dloss,
                                    const unsigned long long *count,
                                    const S *logits, const int32_t *targets,
                                    S *dlogits, int64_t T, int64_t V,
                                    cudaStream_t stream) {
  const char *function = "crossEntropyBackward";
  if (absl::Status status = checkNonNegative(function, "T", T); !status.ok())
    return status;
  if (absl::Status status = checkNonNegative(function, "V", V); !status.ok())
    return status;
  if (T == 0 || V == 0)
    return absl::OkStatus();
  return launch("crossEntropyBackward", crossEntropyBackwardKernel<S>,
                blocksForRows(T), kThreads, 0, stream, dloss, count, logits,
                targets, dlogits, T, V);
}

/// The host-value form: dloss and count staged into device scalars (from
/// pageable memory, so the call returns once they are copied).
template <typename S>
absl::Status crossEntropyBackwardFromHost(float dloss, const S *logits,
                                          const int32_t *targets, S *dlogits,
                                          int64_t T, int64_t V, int64_t count,
                                          cudaStream_t stream) {
  if (absl::Status status =
          checkNonNegative("crossEntropyBackward", "count", count);
      !status.ok())
    return status;
  MOE_DEVICE_BUFFER(float, dlossOnDevice, 1, stream);
  MOE_DEVICE_BUFFER(unsigned long long, countOnDevice, 1, stream);
  unsigned long long n = static_cast<unsigned long long>(count);
  MOE_CUDA_OK(cudaMemcpyAsync(dlossOnDevice.get(), &dloss, sizeof(float),
                              cudaMemcpyHostToDevice, stream));
  MOE_CUDA_OK(cudaMemcpyAsync(countOnDevice.get(), &n, sizeof(n),
                              cudaMemcpyHostToDevice, stream));
  return crossEntropyBackwardOn(dlossOnDevice.get(), countOnDevice.get(),
                                logits, targets, dlogits, T, V, stream);
}
} // namespace

absl::Status crossEntropySums(const float *logits, const int32_t *targets,
                              int64_t T, int64_t V, double *sum,
                              unsigned long long *count, cudaStream_t stream) {
  return crossEntropySumsOn(logits, targets, T, V, sum, count, stream);
}

absl::Status crossEntropySums(const uint16_t *logits, const int32_t *targets,
                              int64_t T, int64_t V, double *sum,
                              unsigned long long *count, cudaStream_t stream) {
  return crossEntropySumsOn(logits, targets, T, V, sum, count, stream);
}

absl::Status crossEntropyBackward(float dloss, const float *logits,
                                  const int32_t *targets, float *dlogits,
                                  int64_t T, int64_t V, int64_t count,
                                  cudaStream_t stream) {
  return crossEntropyBackwardFromHost(dloss, logits, targets, dlogits, T, V,
                                      count, stream);
}

absl::Status crossEntropyBackward(float dloss, const uint16_t *logits,
                                  const int32_t *targets, uint16_t *dlogits,
                                  int64_t T, int64_t V, int64_t count,
                                  cudaStream_t stream) {
  return crossEntropyBackwardFromHost(dloss, logits, targets, dlogits, T, V,
                                      count, stream);
}

absl::Status crossEntropyBackward(const float *dloss,
                                  const unsigned long long *count,
                                  const float *logits, const int32_t *targets,
                                  float *dlogits, int64_t T, int64_t V,
                                  cudaStream_t stream) {
  return crossEntropyBackwardOn(dloss, count, logits, targets, dlogits, T, V,
                                stream);
}

absl::Status crossEntropyBackward(const float *dloss,
                                  const unsigned long long *count,
                                  const uint16_t *logits,
                                  const int32_t *targets, uint16_t *dlogits,
                                  int64_t T, int64_t V, cudaStream_t stream) {
  return crossEntropyBackwardOn(dloss, count, logits, targets, dlogits, T, V,
                                stream);
}

absl::Status auxLossStatistics(const float *probs, int64_t T, int64_t E,
                               int64_t topK, unsigned long long *count,
                               double *probSum, cudaStream_t stream) {
  const char *function = "auxLossStatistics";
  if (absl::Status status = checkNonNegative(function, "T", T); !status.ok())
    return status;
  if (E < 1 || E > kMaxExperts)
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": E must be in [1, ", kMaxExperts, "], found ", E));
  if (topK < 1 || topK > E)
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": topK must be in [1, E = ", E, "], found ", topK));
  MOE_CUDA_OK(cudaMemsetAsync(count, 0, E * sizeof(unsigned long long),
                              stream));
  MOE_CUDA_TRY(launch("auxLossStatistics (count)", auxLossCountKernel,
                      gridFor(T), kThreads, 0, stream, probs, T, E, topK,
                      count));
  return launch("auxLossStatistics (probSum)", auxLossProbSumKernel,
                static_cast<unsigned>(E), kThreads, 0, stream, probs, T, E,
                probSum);
}

absl::Status auxLossBackward(const float *dloss,
                             const unsigned long long *count, int64_t tokens,
                             float *dprobs, int64_t T, int64_t E,
                             cudaStream_t stream) {
  const char *function = "auxLossBackward";
  if (absl::Status status = checkNonNegative(function, "T", T); !status.ok())
    return status;
  if (E < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": E must be >= 1, found ", E));
  // As the CPU: no tokens on any rank, no loss and nothing written.
  if (tokens <= 0 || T == 0)
    return absl::OkStatus();
  double tokensSquared =
      static_cast<double>(tokens) * static_cast<double>(tokens);
  return launch("auxLossBackward", auxLossBackwardKernel, gridFor(T * E),
                kThreads, 0, stream, dloss, count, tokensSquared, dprobs, T, E);
}

absl::Status auxLossBackward(float dloss, const unsigned long long *count,
                             int64_t tokens, float *dprobs, int64_t T,
                             int64_t E, cudaStream_t stream) {
  MOE_DEVICE_BUFFER(float, dlossOnDevice, 1, stream);
  MOE_CUDA_OK(cudaMemcpyAsync(dlossOnDevice.get(), &dloss, sizeof(float),
                              cudaMemcpyHostToDevice, stream));
  return auxLossBackward(dlossOnDevice.get(), count, tokens, dprobs, T, E,
                         stream);
}

} // namespace moe::rt::cuda
