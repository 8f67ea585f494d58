//===- HardwareTest.cpp - the bundled hardware descriptions ---------------===//
//
// hardware/gpus.yaml and the cluster files load, agree with each other, and
// agree with what the compiler decides by (Target.h: which GPUs have FP8
// GEMMs).
//
//===----------------------------------------------------------------------===//
#include "moe/Target/Hardware.h"
#include "moe/Transforms/Target.h"
#include "llvm/ADT/STLExtras.h"

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
    EXPECT_EQ(gpu.fp8Tflops > 0, target->fp8Gemms());
    EXPECT_EQ(gpu.computeCapability, target->computeCapability);
    EXPECT_EQ(gpu.peakFlops(/*fp8=*/true) > gpu.peakFlops(false),
              target->fp8Gemms());
    // The planner and the cost model find the GPU's capability record.
    const ::moe::caps::Capabilities *record = capabilitiesOf(gpu);
    ASSERT_NE(record, nullptr);
    EXPECT_EQ(record->backend, "cuda");
    EXPECT_EQ(record->fp8Gemms(), gpu.fp8Tflops > 0);
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

// A cluster file copies its GPU's entry; the fitted efficiencies must not
// drift apart between the copies.
TEST(HardwareTest, ClustersCopyTheirGpuEntry) {
  llvm::Expected<std::vector<GpuSpec>> gpus = loadGpus(bundled("gpus.yaml"));
  ASSERT_TRUE(static_cast<bool>(gpus)) << llvm::toString(gpus.takeError());
  for (const char *file :
       {"leonardo.yaml", "selene.yaml", "grand-teton-h100.yaml"}) {
    SCOPED_TRACE(file);
    llvm::Expected<ClusterSpec> cluster = loadCluster(bundled(file));
    ASSERT_TRUE(static_cast<bool>(cluster))
        << llvm::toString(cluster.takeError());
    auto listed = llvm::find_if(
        *gpus, [&](const GpuSpec &gpu) { return gpu.name == cluster->gpu.name; });
    ASSERT_NE(listed, gpus->end());
    EXPECT_EQ(listed->memoryGiB, cluster->gpu.memoryGiB);
    EXPECT_EQ(listed->hbmGBps, cluster->gpu.hbmGBps);
    EXPECT_EQ(listed->bf16Tflops, cluster->gpu.bf16Tflops);
    EXPECT_EQ(listed->fp8Tflops, cluster->gpu.fp8Tflops);
    EXPECT_EQ(listed->gemmEfficiency, cluster->gpu.gemmEfficiency);
    EXPECT_EQ(listed->hbmEfficiency, cluster->gpu.hbmEfficiency);
  }
}

TEST(HardwareTest, ErrorsNameTheFile) {
  llvm::Expected<ClusterSpec> missing = loadCluster(bundled("no-such.yaml"));
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("no-such.yaml"),
            std::string::npos);
}

} // namespace
