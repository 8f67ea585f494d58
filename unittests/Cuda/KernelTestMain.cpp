//===- KernelTestMain.cpp - run the CUDA kernel tests, or skip them -------===//
//
// Without a GPU (CI, this project's machines) the tests cannot run: exit 77,
// which ctest reports as skipped (SKIP_RETURN_CODE), naming why.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cuda/Device.h"

#include "gtest/gtest.h"

#include <cstdio>

#ifdef MOE_VIRTUAL_GPU
#include "VirtualGpu/KernelLaunch.h"

namespace {
/// On the virtual GPU, the launch log names the test that launched each
/// kernel (scripts/cuda-kernel-coverage.sh).
class LaunchLabels : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo &test) override {
    moe::rt::virtual_gpu::setLaunchLabel(
        std::string(test.test_suite_name()) + "." + test.name());
  }
};
} // namespace
#endif

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
#ifdef MOE_VIRTUAL_GPU
  testing::UnitTest::GetInstance()->listeners().Append(new LaunchLabels);
#endif
  return RUN_ALL_TESTS();
}
