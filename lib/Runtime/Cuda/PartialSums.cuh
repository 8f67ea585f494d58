//===- PartialSums.cuh - deterministic sums of block partials ---*- CUDA -*-===//
//
// Private to the CUDA backend's kernels: the second stage of a two-stage
// sum. A first kernel writes one double per block; this one adds them in
// an order fixed by their count alone, so a loss or a norm is the same on
// every run (double atomics would add the blocks in arrival order).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_PARTIALSUMS_CUH
#define MOE_LIB_RUNTIME_CUDA_PARTIALSUMS_CUH

#include "BlockReduce.cuh"
#include "Launch.h"
#include "SharedMemory.cuh"

namespace moe::rt::cuda {

/// *sum += partials[0, count): each thread adds a fixed stride of them,
/// then the block's tree. Launched on one block of kThreads threads;
/// internal to each file that includes it.
static __global__ void addPartialsKernel(const double *partials,
                                         unsigned count, double *sum) {
  MOE_BLOCK_SHARED(double, shared, kThreads);
  double mine = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
    mine += partials[i];
  double total = blockSum(mine, shared);
  if (threadIdx.x == 0)
    *sum += total;
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_PARTIALSUMS_CUH
