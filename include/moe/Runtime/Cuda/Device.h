//===- Device.h - the CUDA devices a process can use ------------*- C++ -*-===//
//
// The CUDA backend's entry: which GPUs there are and what they can do. On a
// machine without a GPU or driver (CI) this says why, as an error, instead
// of failing later inside a kernel launch.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_DEVICE_H
#define MOE_RUNTIME_CUDA_DEVICE_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  /// Major * 10 + minor: 80 for the A100, 90 for the H100 and H200.
  int computeCapability = 0;
  uint64_t memoryBytes = 0;
  int multiprocessors = 0;
};

/// The devices the CUDA runtime sees. Fails, saying why, when there are
/// none: no driver (a machine without a GPU), no device, or another CUDA
/// error.
absl::StatusOr<std::vector<DeviceInfo>> listDevices();

/// Whether GEMMs can read FP8 inputs on tensor cores: sm_89 and newer.
inline bool hasFp8TensorCores(int computeCapability) {
  return computeCapability >= 89;
}

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_DEVICE_H
