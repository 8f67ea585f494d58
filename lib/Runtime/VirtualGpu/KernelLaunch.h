//===- KernelLaunch.h - a kernel launch on the virtual GPU ------*- C++ -*-===//
//
// Private to the CUDA backend's virtual-GPU build: what launch() (Launch.h)
// does there. The arguments are converted to the kernel's parameters at the
// call, as a launch copies them; the launch is checked against the device's
// limits at once (an error for cudaGetLastError, as a device reports a bad
// configuration), then put on the stream, where the thread engine runs it.
// When it runs, every pointer argument must point into live device memory:
// one freed in stream order, or host memory, is a fault naming the argument.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_KERNELLAUNCH_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_KERNELLAUNCH_H

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace moe::rt::virtual_gpu {

/// A pointer the kernel was given, by position (0-based).
struct PointerArgument {
  int position;
  const void *pointer;
};

/// Names what launches next in the launch log (MOE_VIRTUAL_GPU_LAUNCH_LOG)
/// after the program: a test binary sets the running test's name.
void setLaunchLabel(std::string label);

/// Checks the configuration, then enqueues `body` (which runs the kernel
/// for the current thread) on `stream`. Sets the error cudaGetLastError
/// reports.
void submitKernel(const void *kernel, const char *name, dim3 grid, dim3 block,
                  size_t sharedBytes, cudaStream_t stream,
                  std::vector<PointerArgument> pointers,
                  std::function<void()> body);

template <typename... Params, typename... Args>
void launchKernel(const char *name, void (*kernel)(Params...), dim3 grid,
                  dim3 block, size_t sharedBytes, cudaStream_t stream,
                  Args &&...args) {
  using Arguments = std::tuple<std::decay_t<Params>...>;
  Arguments arguments(std::forward<Args>(args)...);
  std::vector<PointerArgument> pointers;
  std::apply(
      [&](const auto &...each) {
        int position = 0;
        auto note = [&](const auto &argument) {
          if constexpr (std::is_pointer_v<std::decay_t<decltype(argument)>>)
            pointers.push_back({position, static_cast<const void *>(argument)});
          ++position;
        };
        (note(each), ...);
      },
      arguments);
  submitKernel(reinterpret_cast<const void *>(kernel), name, grid, block,
               sharedBytes, stream, std::move(pointers),
               [kernel, arguments]() { std::apply(kernel, arguments); });
}

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_KERNELLAUNCH_H
