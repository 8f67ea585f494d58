//===- Launch.h - launching the CUDA backend's kernels ----------*- C++ -*-===//
//
// Private to the CUDA backend: grid sizes for grid-stride loops, and the
// status of a launch.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_LAUNCH_H
#define MOE_LIB_RUNTIME_CUDA_LAUNCH_H

#include "CudaStatus.h"

#include <algorithm>
#include <cstdint>

namespace moe::rt::cuda {

/// Threads per block of the elementwise kernels.
inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements: enough to fill a large
/// GPU, never more than the elements need (at least 1).
inline unsigned gridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535));
}

/// The status of the launch just made (a bad configuration, no device).
inline absl::Status launched(const char *kernel) {
  return cudaStatus(cudaGetLastError(), kernel);
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_LAUNCH_H
