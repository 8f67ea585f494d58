//===- KernelCostTest.cpp - GEMMs by shape and attention by kernel --------===//
#include "moe/Target/KernelCost.h"
#include "moe/Target/Hardware.h"

#include "gtest/gtest.h"

using namespace mlir::moe;

namespace {
/// A GPU of 4 SMs with 128 x 128 tiles, 100 TFLOP/s of BF16 (200 of FP8)
/// at 0.8 of the peak, and 1 TB/s of HBM at 0.8.
GpuSpec smallGpu() {
  GpuSpec gpu;
  gpu.name = "small";
  gpu.bf16Tflops = 100;
  gpu.fp8Tflops = 200;
  gpu.hbmGBps = 1000;
  gpu.gemmEfficiency = 0.8;
  gpu.hbmEfficiency = 0.8;
  gpu.sms = 4;
  gpu.tileRows = 128;
  gpu.tileColumns = 128;
  gpu.attentionKernels = {{"flash2", 0.5, 0.4}};
  return gpu;
}

double tileSeconds(const GpuSpec &gpu, double k) {
  return 2.0 * 128 * 128 * k / (gpu.gemmFlops(false) / gpu.sms);
}
} // namespace

TEST(KernelCostTest, AFullWaveOfFullTilesRunsAtTheFittedEfficiency) {
  GpuSpec gpu = smallGpu();
  // 2 x 2 tiles on 4 SMs: one wave.
  GemmShape shape{256, 256, 8192};
  EXPECT_DOUBLE_EQ(gemmSeconds(gpu, shape, false, 2), tileSeconds(gpu, 8192));
  EXPECT_NEAR(gemmEfficiencyOf(gpu, shape, false, 2), 0.8, 1e-12);
}

TEST(KernelCostTest, APartialWaveCostsAWholeOne) {
  GpuSpec gpu = smallGpu();
  // 5 tiles on 4 SMs: two waves, for 5/8 of their work.
  GemmShape shape{640, 128, 8192};
  EXPECT_DOUBLE_EQ(gemmSeconds(gpu, shape, false, 2),
                   2 * tileSeconds(gpu, 8192));
  EXPECT_NEAR(gemmEfficiencyOf(gpu, shape, false, 2), 0.8 * 5 / 8, 1e-12);
}

TEST(KernelCostTest, AnExpertsFewRowsFillPartOfATile) {
  GpuSpec gpu = smallGpu();
  // 4 experts of 32 rows each: 4 tiles a quarter full.
  GemmShape experts{32, 128, 8192, 4};
  EXPECT_DOUBLE_EQ(gemmSeconds(gpu, experts, false, 2), tileSeconds(gpu, 8192));
  EXPECT_NEAR(gemmEfficiencyOf(gpu, experts, false, 2), 0.2, 1e-12);
}

TEST(KernelCostTest, TheTileOverheadWeighsOnShortReductions) {
  GpuSpec gpu = smallGpu();
  gpu.tileOverheadK = 128;
  GemmShape shortK{256, 256, 128}, longK{256, 256, 8192};
  EXPECT_NEAR(gemmEfficiencyOf(gpu, longK, false, 2), 0.8 * 8192 / 8320, 1e-12);
  // Short K also moves more bytes than it computes: the roofline's HBM
  // side may bind, but never makes it faster than half the tiles' rate.
  EXPECT_LE(gemmEfficiencyOf(gpu, shortK, false, 2), 0.4 + 1e-12);
}

TEST(KernelCostTest, AThinGemmRunsAtHbmsRate) {
  GpuSpec gpu = smallGpu();
  gpu.hbmGBps = 100;
  // A matrix-vector product: 2 FLOPs per weight element read.
  GemmShape gemv{1, 4096, 4096};
  double bytes = (4096.0 + 4096.0 * 4096 + 4096) * 2;
  EXPECT_DOUBLE_EQ(gemmSeconds(gpu, gemv, false, 2),
                   bytes / gpu.streamBytesPerSecond());
}

TEST(KernelCostTest, Fp8RunsAtTheFp8Peak) {
  GpuSpec gpu = smallGpu();
  GemmShape shape{256, 256, 8192};
  EXPECT_DOUBLE_EQ(gemmSeconds(gpu, shape, true, 1),
                   gemmSeconds(gpu, shape, false, 2) / 2);
}

TEST(KernelCostTest, AttentionRunsAtItsKernelsEfficiency) {
  GpuSpec gpu = smallGpu();
  EXPECT_DOUBLE_EQ(attentionSeconds(gpu, "flash2", 1e12, false), 1e12 / 50e12);
  EXPECT_DOUBLE_EQ(attentionSeconds(gpu, "flash2", 1e12, true), 1e12 / 40e12);
  EXPECT_FALSE(checkAttentionKernel(gpu, "flash2"));
  std::optional<std::string> missing = checkAttentionKernel(gpu, "flash3");
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, "gpu 'small' has no efficiency for attention kernel "
                      "'flash3' (it lists flash2; hardware/gpus.yaml)");
}
