//===- Device.cpp - the CUDA devices a process can use --------------------===//
#include "moe/Runtime/Cuda/Device.h"

#include "CudaStatus.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {

absl::StatusOr<std::vector<DeviceInfo>> listDevices() {
  // Without a driver the call fails and leaves the count untouched.
  int count = 0;
  cudaError_t result = cudaGetDeviceCount(&count);
  if (result == cudaErrorInsufficientDriver || result == cudaErrorNoDevice) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: ",
        result == cudaErrorNoDevice ? "the driver sees no GPU"
                                    : "no CUDA driver (a machine without a GPU)",
        " (", cudaGetErrorName(result), ")"));
  }
  MOE_CUDA_OK(result);
  if (count == 0)
    return absl::FailedPreconditionError("no CUDA device: the driver sees no GPU");
  std::vector<DeviceInfo> devices;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp properties{};
    MOE_CUDA_OK(cudaGetDeviceProperties(&properties, ordinal));
    DeviceInfo info;
    info.ordinal = ordinal;
    info.name = properties.name;
    info.computeCapability = properties.major * 10 + properties.minor;
    info.memoryBytes = properties.totalGlobalMem;
    info.multiprocessors = properties.multiProcessorCount;
    devices.push_back(std::move(info));
  }
  return devices;
}

} // namespace moe::rt::cuda
