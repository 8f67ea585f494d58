//===- KernelTestMain.cpp - run the CUDA kernel tests, or skip them -------===//
//
// Without a GPU (CI, this project's machines) the tests cannot run: exit 77,
// which ctest reports as skipped (SKIP_RETURN_CODE), naming why.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cuda/Device.h"

#include "gtest/gtest.h"

#include <cstdio>

int main(int argc, char **argv) {
  absl::StatusOr<std::vector<moe::rt::cuda::DeviceInfo>> devices =
      moe::rt::cuda::listDevices();
  if (!devices.ok()) {
    std::printf("skipped: %s\n", std::string(devices.status().message()).c_str());
    return 77;
  }
  const moe::rt::cuda::DeviceInfo &device = devices->front();
  std::printf("device 0: %s, sm_%d, %.1f GiB\n", device.name.c_str(),
              device.computeCapability, device.memoryBytes / 1073741824.0);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
