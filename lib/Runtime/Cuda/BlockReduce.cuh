//===- BlockReduce.cuh - sums and maxima over a thread block ----*- CUDA -*-===//
//
// Private to the CUDA backend's kernels. Every thread of the block calls
// these (blockDim.x == kThreads, a power of two) with `shared` holding
// kThreads elements; every thread gets the result, and `shared` may be used
// again right after.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_BLOCKREDUCE_CUH
#define MOE_LIB_RUNTIME_CUDA_BLOCKREDUCE_CUH

namespace moe::rt::cuda {

template <typename T, typename Combine>
__device__ T blockReduce(T mine, T *shared, Combine combine) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  T total = shared[0];
  __syncthreads(); // everyone has read it before `shared` is reused
  return total;
}

__device__ inline double blockSum(double mine, double *shared) {
  return blockReduce(mine, shared, [](double a, double b) { return a + b; });
}

__device__ inline float blockMax(float mine, float *shared) {
  return blockReduce(mine, shared, [](float a, float b) { return fmaxf(a, b); });
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_BLOCKREDUCE_CUH
