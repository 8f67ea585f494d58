//===- HardwareTest.cpp - the bundled hardware descriptions ---------------===//
//
// hardware/gpus.yaml and hardware/leonardo.yaml load, and agree with what
// the compiler decides by (Target.h: which GPUs have FP8 GEMMs).
//
//===----------------------------------------------------------------------===//
#include "moe/Target/Hardware.h"
#include "moe/Transforms/Target.h"

#include "gtest/gtest.h"

using namespace mlir::moe;

namespace {

std::string bundled(const char *name) {
  return std::string(MOE_SOURCE_DIR) + "/hardware/" + name;
}

TEST(HardwareTest, GpusAgreeWithTheTargets) {
  llvm::Expected<std::vector<GpuSpec>> gpus = loadGpus(bundled("gpus.yaml"));
  ASSERT_TRUE(static_cast<bool>(gpus)) << llvm::toString(gpus.takeError());
  ASSERT_EQ(gpus->size(), 6u);
  for (const GpuSpec &gpu : *gpus) {
    SCOPED_TRACE(gpu.name);
    // The FP8 GEMM peak exists exactly where the target has FP8 GEMMs.
    const Target *target =
        lookupTarget(gpu.name.substr(0, 4) == "A100"   ? "a100"
                     : gpu.name.substr(0, 4) == "H100" ? "h100"
                                                       : "h200");
    ASSERT_NE(target, nullptr);
    EXPECT_EQ(gpu.fp8Tflops > 0, target->fp8Gemms);
    EXPECT_EQ(gpu.computeCapability, target->computeCapability);
    EXPECT_EQ(gpu.peakFlops(/*fp8=*/true) > gpu.peakFlops(false),
              target->fp8Gemms);
  }
}

TEST(HardwareTest, LeonardoBooster) {
  llvm::Expected<ClusterSpec> cluster = loadCluster(bundled("leonardo.yaml"));
  ASSERT_TRUE(static_cast<bool>(cluster)) << llvm::toString(cluster.takeError());
  EXPECT_EQ(cluster->gpusPerNode, 4);
  EXPECT_EQ(cluster->gpus(), 3456 * 4);
  EXPECT_EQ(cluster->gpu.memoryGiB, 64);
  // 4 x 100 Gb/s HDR per node: 12.5 GB/s per GPU.
  EXPECT_EQ(cluster->internodeGBps, 12.5);
  EXPECT_EQ(cluster->gpu.peakFlops(true), cluster->gpu.peakFlops(false));
}

TEST(HardwareTest, ErrorsNameTheFile) {
  llvm::Expected<ClusterSpec> missing = loadCluster(bundled("no-such.yaml"));
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("no-such.yaml"),
            std::string::npos);
}

} // namespace
