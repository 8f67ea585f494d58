//===- Embedding.cu - token embedding lookup and its gradient -------------===//
//
// The gradient adds the rows of tokens that share an id. Rather than atomics
// (whose order varies from run to run), each thread owns one column of the
// table and walks the tokens in order: the sums are those of the CPU kernel,
// bit for bit, and the columns of a warp are adjacent in memory.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "Launch.h"

namespace moe::rt::cuda {
namespace {

constexpr unsigned long long kNoBadToken = ~0ull;

__global__ void embeddingForwardKernel(const int32_t *tokens,
                                       const float *table, float *y, int64_t T,
                                       int64_t V, int64_t H,
                                       unsigned long long *firstBad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t t = i / H, c = i % H;
    int32_t id = tokens[t];
    bool valid = id >= 0 && id < V;
    y[i] = valid ? table[id * H + c] : 0.0f;
    if (!valid && c == 0)
      atomicMin(firstBad, static_cast<unsigned long long>(t));
  }
}

__global__ void setKernel(unsigned long long *value, unsigned long long to) {
  *value = to;
}

/// kNoBadToken (no bad id) becomes -1.
__global__ void finishFirstBadKernel(unsigned long long *firstBad) {
  if (*firstBad == kNoBadToken)
    *reinterpret_cast<int64_t *>(firstBad) = -1;
}

__global__ void embeddingBackwardKernel(const float *dy, const int32_t *tokens,
                                        float *dtable, int64_t T, int64_t V,
                                        int64_t H) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < H;
       c += int64_t(blockDim.x) * gridDim.x)
    for (int64_t t = 0; t < T; ++t) {
      int32_t id = tokens[t];
      if (id >= 0 && id < V)
        dtable[id * H + c] += dy[t * H + c];
    }
}

} // namespace

absl::Status embeddingForward(const int32_t *tokens, const float *table,
                              float *y, int64_t T, int64_t V, int64_t H,
                              int64_t *firstBad, cudaStream_t stream) {
  auto *bad = reinterpret_cast<unsigned long long *>(firstBad);
  setKernel<<<1, 1, 0, stream>>>(bad, kNoBadToken);
  embeddingForwardKernel<<<gridFor(T * H), kThreads, 0, stream>>>(
      tokens, table, y, T, V, H, bad);
  finishFirstBadKernel<<<1, 1, 0, stream>>>(bad);
  return launched("embeddingForward");
}

absl::Status embeddingBackward(const float *dy, const int32_t *tokens,
                               float *dtable, int64_t T, int64_t V, int64_t H,
                               cudaStream_t stream) {
  MOE_CUDA_OK(cudaMemsetAsync(dtable, 0, V * H * sizeof(float), stream));
  embeddingBackwardKernel<<<gridFor(H), kThreads, 0, stream>>>(dy, tokens,
                                                              dtable, T, V, H);
  return launched("embeddingBackward");
}

} // namespace moe::rt::cuda
