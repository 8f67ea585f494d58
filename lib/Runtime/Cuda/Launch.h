//===- Launch.h - launching the CUDA backend's kernels ----------*- C++ -*-===//
//
// Private to the CUDA backend: grid sizes for grid-stride loops, and the one
// way a kernel is launched. Every launch goes through launch(), never
// `<<<>>>` at the call site, so the same call runs the kernel on a GPU (nvcc)
// and on the virtual GPU (the backend's sources built by the host compiler,
// lib/Runtime/VirtualGpu), where the launch is checked against the emulated
// device's limits and its body runs one fiber per CUDA thread.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_LAUNCH_H
#define MOE_LIB_RUNTIME_CUDA_LAUNCH_H

#include "CudaStatus.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#ifdef MOE_VIRTUAL_GPU
#include "VirtualGpu/KernelLaunch.h"
#endif

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

/// Launches `kernel` (a __global__ function; a template one with its
/// arguments spelled, `addKernel<float>`) on `grid` x `block` threads with
/// `sharedBytes` of dynamic shared memory, on `stream`, and returns the
/// launch's status. `name` says which launch it was in errors ("add
/// (bf16)"). The arguments convert to the kernel's parameters as in a call.
template <typename... Params, typename... Args>
absl::Status launch(const char *name, void (*kernel)(Params...), dim3 grid,
                    dim3 block, size_t sharedBytes, cudaStream_t stream,
                    Args &&...args) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "launch: the kernel takes another number of arguments");
#ifdef MOE_VIRTUAL_GPU
  virtual_gpu::launchKernel(name, kernel, grid, block, sharedBytes, stream,
                            std::forward<Args>(args)...);
#else
  kernel<<<grid, block, sharedBytes, stream>>>(std::forward<Args>(args)...);
#endif
  return launched(name);
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_LAUNCH_H
