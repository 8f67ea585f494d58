//===- KernelLaunch.cpp - a kernel launch on the virtual GPU --------------===//
//
// The launch log: with MOE_VIRTUAL_GPU_LAUNCH_LOG=PATH every launch appends
// one tab-separated line to PATH,
//   kernel  launch-name  grid  block  dynamic-shared-bytes  program
// (grid and block as x,y,z; program is MOE_VIRTUAL_GPU_PROGRAM, else the
// executable's name, then ":" and the label setLaunchLabel set, the test
// running in a test binary), which scripts/cuda-kernel-coverage.sh and
// scripts/cuda-resources.sh read: which tests launch which kernels, and
// with what block sizes.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/KernelLaunch.h"

#include "VirtualGpu/KernelSymbols.h"
#include "VirtualGpu/Runtime.h"
#include "VirtualGpu/ThreadEngine.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace moe::rt::virtual_gpu {

namespace {

std::mutex launchLogMutex;
std::string launchLabel;

std::string describeDim(dim3 d) { return absl::StrCat(d.x, ",", d.y, ",", d.z); }

void logLaunch(const std::string &kernel, const char *name, dim3 grid,
               dim3 block, size_t sharedBytes) {
  static const char *path = std::getenv("MOE_VIRTUAL_GPU_LAUNCH_LOG");
  if (!path || !*path)
    return;
  static const std::string program = [] {
    const char *label = std::getenv("MOE_VIRTUAL_GPU_PROGRAM");
    return std::string(label && *label ? label : program_invocation_short_name);
  }();
  std::lock_guard<std::mutex> lock(launchLogMutex);
  std::string line = absl::StrCat(
      kernel, "\t", name, "\t", describeDim(grid), "\t", describeDim(block),
      "\t", sharedBytes, "\t", program,
      launchLabel.empty() ? "" : ":", launchLabel, "\n");
  // Appended whole with one write: several processes (ranks) share a log.
  if (FILE *file = std::fopen(path, "a")) {
    std::fwrite(line.data(), 1, line.size(), file);
    std::fclose(file);
  }
}

/// Why the configuration cannot launch on `device`, or "".
std::string configurationProblem(const DeviceModel &device, dim3 grid,
                                 dim3 block) {
  const unsigned blockDims[3] = {block.x, block.y, block.z};
  const unsigned gridDims[3] = {grid.x, grid.y, grid.z};
  for (int axis = 0; axis < 3; ++axis) {
    const char *name = "xyz" + axis;
    if (blockDims[axis] == 0 || gridDims[axis] == 0)
      return absl::StrCat("an empty ", std::string(1, *name), " dimension");
    if (blockDims[axis] > static_cast<unsigned>(device.maxBlockDim[axis]))
      return absl::StrCat("block.", std::string(1, *name), " = ",
                          blockDims[axis], " exceeds ",
                          device.maxBlockDim[axis]);
    if (gridDims[axis] > static_cast<unsigned>(device.maxGridDim[axis]))
      return absl::StrCat("grid.", std::string(1, *name), " = ",
                          gridDims[axis], " exceeds ", device.maxGridDim[axis]);
  }
  uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > static_cast<uint64_t>(device.maxThreadsPerBlock))
    return absl::StrCat(threads, " threads per block exceed ",
                        device.maxThreadsPerBlock);
  return "";
}

} // namespace

void setLaunchLabel(std::string label) {
  std::lock_guard<std::mutex> lock(launchLogMutex);
  launchLabel = std::move(label);
}

void submitKernel(const void *kernel, const char *name, dim3 grid, dim3 block,
                  size_t sharedBytes, cudaStream_t stream,
                  std::vector<PointerArgument> pointers,
                  std::function<void()> body) {
  const DeviceModel *device = selectedDevice();
  if (!device) {
    setLastError(cudaErrorNoDevice);
    return;
  }
  const std::string &symbol = kernelSymbol(kernel);
  if (std::string problem = configurationProblem(*device, grid, block);
      !problem.empty()) {
    std::fprintf(stderr, "virtual gpu: launch '%s' (%s) refused: %s\n", name,
                 symbol.c_str(), problem.c_str());
    setLastError(cudaErrorInvalidConfiguration);
    return;
  }
  size_t limit = dynamicSharedLimit(kernel);
  if (sharedBytes > limit) {
    std::fprintf(stderr,
                 "virtual gpu: launch '%s' (%s) refused: %zu bytes of dynamic "
                 "shared memory exceed the kernel's limit of %zu%s\n",
                 name, symbol.c_str(), sharedBytes, limit,
                 limit == device->sharedBytesPerBlock
                     ? " (cudaFuncSetAttribute did not raise it)"
                     : "");
    setLastError(cudaErrorInvalidValue);
    return;
  }
  logLaunch(symbol, name, grid, block, sharedBytes);
  auto launch = std::make_shared<Grid>();
  launch->name = name;
  launch->grid = grid;
  launch->block = block;
  launch->dynamicSharedBytes = sharedBytes;
  launch->sharedLimitBytes = limit;
  launch->body = std::move(body);
  std::string what = absl::StrCat("kernel '", name, "'");
  cudaError_t queued = enqueue(
      stream, what,
      [launch, pointers = std::move(pointers), what, symbol]() {
        for (const PointerArgument &argument : pointers) {
          if (!argument.pointer)
            continue;
          std::string label = absl::StrCat("argument ", argument.position,
                                           " of ", what, " (", symbol, ")");
          if (absl::Status status =
                  checkDeviceRange(argument.pointer, 1, label.c_str());
              !status.ok()) {
            fault(cudaErrorIllegalAddress, std::string(status.message()));
            return;
          }
        }
        runGrid(*launch);
      });
  if (queued != cudaSuccess)
    setLastError(queued);
}

} // namespace moe::rt::virtual_gpu
