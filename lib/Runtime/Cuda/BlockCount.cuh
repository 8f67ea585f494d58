//===- BlockCount.cuh - ranks of flagged threads in a block ----*- CUDA -*-===//
//
// Private to the CUDA backend. The router's capacity dropping and the
// grouping of slots by expert both walk a sequence in order, one block-wide
// chunk at a time, and need each flagged element's rank among the flagged
// ones: a warp ballot gives the rank within the warp, and the warps' counts
// (at most 32 of them) are added up by every thread, which is cheap and has
// no order to get wrong.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_BLOCKCOUNT_CUH
#define MOE_LIB_RUNTIME_CUDA_BLOCKCOUNT_CUH

#include <cstdint>

namespace moe::rt::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullWarp = 0xffffffffu;

/// The number of threads of the block below this one (in threadIdx.x order)
/// whose `flag` is set; *total becomes the block's count. Every thread of the
/// block must call it (it synchronises the block), with blockDim.x a
/// multiple of 32. `warpCounts` is shared-memory scratch of blockDim.x / 32
/// entries, free again when the call returns.
__device__ inline int blockExclusiveCount(bool flag, int *warpCounts,
                                          int *total) {
  unsigned lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  unsigned ballot = __ballot_sync(kFullWarp, flag);
  int below = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0)
    warpCounts[warp] = __popc(ballot);
  __syncthreads();
  int sum = 0;
  for (unsigned w = 0; w < blockDim.x / kWarpSize; ++w) {
    if (w < warp)
      below += warpCounts[w];
    sum += warpCounts[w];
  }
  // The next call overwrites warpCounts: everyone must have read it first.
  __syncthreads();
  *total = sum;
  return below;
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_BLOCKCOUNT_CUH
