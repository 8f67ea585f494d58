//===- Embedding.cu - token embedding lookup and its gradient -------------===//
//
// The gradient adds the rows of tokens that share an id. Rather than atomics
// (whose order varies from run to run), each thread owns one column of the
// table for one class of ids and walks the tokens in order
// (WeightGradBlocks.h): the sums are those of the CPU kernel, bit for bit,
// and the columns of a warp are adjacent in memory.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "DeviceSimt.cuh"
#include "FirstBadId.cuh"
#include "Launch.h"
#include "SharedMemory.cuh"
#include "WeightGradBlocks.h"

namespace moe::rt::cuda {
namespace {

/// S: the storage of the table and y (float, or BF16 bits: a row is copied
/// as it is either way).
template <typename S>
__global__ void embeddingForwardKernel(const int32_t *tokens, const S *table,
                                       S *y, int64_t T, int64_t V, int64_t H,
                                       unsigned long long *firstBad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t t = i / H, c = i % H;
    int32_t id = tokens[t];
    bool valid = id >= 0 && id < V;
    y[i] = valid ? table[id * H + c] : S(0);
    if (!valid && c == 0)
      noteBadId(firstBad, t);
  }
}

template <typename S>
__global__ void __launch_bounds__(weightgrad::kColumns)
    embeddingBackwardKernel(weightgrad::EmbeddingGradArgs<S> args) {
  MOE_BLOCK_SHARED_ALIGNED(unsigned char, tokens,
                           weightgrad::kEmbeddingGradSharedBytes, 16);
  weightgrad::embeddingGradBlock(DeviceSimt{tokens}, args);
}

template <typename S>
absl::Status embeddingForwardOn(const int32_t *tokens, const S *table, S *y,
                                int64_t T, int64_t V, int64_t H,
                                int64_t *firstBad, cudaStream_t stream) {
  auto *bad = reinterpret_cast<unsigned long long *>(firstBad);
  MOE_CUDA_TRY(
      launch("embeddingForward", startFirstBadKernel, 1, 1, 0, stream, bad));
  MOE_CUDA_TRY(launch("embeddingForward", embeddingForwardKernel<S>,
                      gridFor(T * H), kThreads, 0, stream, tokens, table, y, T,
                      V, H, bad));
  return launch("embeddingForward", finishFirstBadKernel, 1, 1, 0, stream, bad);
}

template <typename S>
absl::Status embeddingBackwardOn(const S *dy, const int32_t *tokens,
                                 float *dtable, int64_t T, int64_t V, int64_t H,
                                 cudaStream_t stream) {
  MOE_CUDA_OK(cudaMemsetAsync(dtable, 0, V * H * sizeof(float), stream));
  if (T == 0 || V == 0 || H == 0)
    return absl::OkStatus();
  // Enough id classes to give every SM blocks; any count gives the same
  // sums (each element adds its tokens in token order).
  int64_t parts = V < 64 ? V : 64;
  int64_t columnTiles = (H + weightgrad::kColumns - 1) / weightgrad::kColumns;
  if (columnTiles > 0x7fffffff)
    return absl::InvalidArgumentError("embeddingBackward: too many columns");
  dim3 grid(static_cast<unsigned>(columnTiles), static_cast<unsigned>(parts));
  return launch(
      "embeddingBackward", embeddingBackwardKernel<S>, grid,
      weightgrad::kColumns, 0, stream,
      weightgrad::EmbeddingGradArgs<S>{dy, tokens, dtable, T, V, H, parts});
}

} // namespace

absl::Status embeddingForward(const int32_t *tokens, const float *table,
                              float *y, int64_t T, int64_t V, int64_t H,
                              int64_t *firstBad, cudaStream_t stream) {
  return embeddingForwardOn(tokens, table, y, T, V, H, firstBad, stream);
}

absl::Status embeddingForward(const int32_t *tokens, const uint16_t *table,
                              uint16_t *y, int64_t T, int64_t V, int64_t H,
                              int64_t *firstBad, cudaStream_t stream) {
  return embeddingForwardOn(tokens, table, y, T, V, H, firstBad, stream);
}

absl::Status embeddingBackward(const float *dy, const int32_t *tokens,
                               float *dtable, int64_t T, int64_t V, int64_t H,
                               cudaStream_t stream) {
  return embeddingBackwardOn(dy, tokens, dtable, T, V, H, stream);
}

absl::Status embeddingBackward(const uint16_t *dy, const int32_t *tokens,
                               float *dtable, int64_t T, int64_t V, int64_t H,
                               cudaStream_t stream) {
  return embeddingBackwardOn(dy, tokens, dtable, T, V, H, stream);
}

} // namespace moe::rt::cuda
