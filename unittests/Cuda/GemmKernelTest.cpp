//===- GemmKernelTest.cpp - cuBLASLt GEMMs against the CPU's --------------===//
//
// The three GEMM forms of a linear layer (x W^T, dy W, dy^T x) in BF16, as
// the executor states them, against the CPU kernels on the BF16-rounded
// inputs (so only the order of the fp32 sums differs), and an FP8 GEMM on
// GPUs that have FP8 tensor cores against the CPU's FP8 emulation.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Device.h"
#include "moe/Runtime/Cuda/Gemm.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <cstring>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

/// x rounded to BF16 (nearest even), as castToBf16 rounds it.
std::vector<float> roundedToBf16(std::vector<float> x) {
  for (float &v : x) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    bits = ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16;
    std::memcpy(&v, &bits, sizeof(bits));
  }
  return x;
}

int capability() {
  absl::StatusOr<std::vector<DeviceInfo>> devices = listDevices();
  return devices.ok() ? devices->front().computeCapability : 0;
}

GemmSpec spec(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              int64_t lda, int64_t ldb, int64_t ldc, GemmInput input) {
  GemmSpec s;
  s.transA = transA, s.transB = transB;
  s.m = m, s.n = n, s.k = k, s.lda = lda, s.ldb = ldb, s.ldc = ldc;
  s.a = s.b = input;
  return s;
}

TEST(GemmKernelTest, Bf16LinearLayerForms) {
  const int64_t T = 37, K = 96, N = 80;
  std::vector<float> x = roundedToBf16(randomValues(T * K, 1));
  std::vector<float> w = roundedToBf16(randomValues(N * K, 2));
  std::vector<float> dy = roundedToBf16(randomValues(T * N, 3));
  absl::StatusOr<std::unique_ptr<GemmRunner>> runner =
      GemmRunner::create(capability());
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto bf16 = [](const std::vector<float> &v) {
    DeviceArray<float> f32(v);
    auto out = std::make_unique<DeviceArray<uint16_t>>(v.size());
    EXPECT_TRUE(castToBf16(f32.get(), out->get(), v.size(), nullptr).ok());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return out;
  };
  auto xb = bf16(x), wb = bf16(w), dyb = bf16(dy);

  DeviceArray<float> y(T * N), dx(T * K), dw(N * K);
  ASSERT_TRUE((*runner)->run(spec(false, true, T, N, K, K, K, N, GemmInput::BF16),
                             1.0f, xb->get(), wb->get(), 0.0f, y.get(), nullptr)
                  .ok());
  ASSERT_TRUE((*runner)->run(spec(false, false, T, K, N, N, K, K, GemmInput::BF16),
                             1.0f, dyb->get(), wb->get(), 0.0f, dx.get(), nullptr)
                  .ok());
  ASSERT_TRUE((*runner)->run(spec(true, false, N, K, T, N, K, K, GemmInput::BF16),
                             1.0f, dyb->get(), xb->get(), 0.0f, dw.get(), nullptr)
                  .ok());
  std::vector<float> expectedY(T * N), expectedDx(T * K), expectedDw(N * K);
  cpu::linearForward(x.data(), w.data(), expectedY.data(), T, K, N);
  cpu::linearBackwardInput(dy.data(), w.data(), expectedDx.data(), T, K, N);
  cpu::linearBackwardWeight(dy.data(), x.data(), expectedDw.data(), T, K, N);
  expectClose(y.read(), expectedY, 1e-4f, 1e-4f, "y");
  expectClose(dx.read(), expectedDx, 1e-4f, 1e-4f, "dx");
  expectClose(dw.read(), expectedDw, 1e-4f, 1e-4f, "dw");
  EXPECT_EQ((*runner)->plannedShapes(), 3u);
}

// On sm_89+: x W^T from E4M3 codes with dequantization scales equals the
// CPU's emulation (inputs rounded with the same scales, fp32 GEMM) up to
// the order of the sums.
TEST(GemmKernelTest, Fp8MatchesTheEmulation) {
  int cc = capability();
  if (!hasFp8TensorCores(cc))
    GTEST_SKIP() << "sm_" << cc << " has no FP8 tensor cores";
  const int64_t T = 48, K = 128, N = 64;
  std::vector<float> x = randomValues(T * K, 4), w = randomValues(N * K, 5, 0.02f);
  DeviceArray<float> dx(x), dw(w), amaxX(1), amaxW(1), invX(1), invW(1);
  DeviceArray<uint8_t> qx(T * K), qw(N * K);
  ASSERT_TRUE(absMax(dx.get(), T * K, amaxX.get(), nullptr).ok());
  ASSERT_TRUE(absMax(dw.get(), N * K, amaxW.get(), nullptr).ok());
  ASSERT_TRUE(castToFp8(dx.get(), amaxX.get(), qx.get(), invX.get(), T * K,
                        Fp8Format::E4M3, nullptr)
                  .ok());
  ASSERT_TRUE(castToFp8(dw.get(), amaxW.get(), qw.get(), invW.get(), N * K,
                        Fp8Format::E4M3, nullptr)
                  .ok());
  absl::StatusOr<std::unique_ptr<GemmRunner>> runner = GemmRunner::create(cc);
  ASSERT_TRUE(runner.ok()) << runner.status();
  DeviceArray<float> y(T * N);
  ASSERT_TRUE((*runner)
                  ->run(spec(false, true, T, N, K, K, K, N, GemmInput::E4M3), 1.0f,
                        qx.get(), qw.get(), 0.0f, y.get(), nullptr, invX.get(),
                        invW.get())
                  .ok());
  std::vector<float> xq(T * K), wq(N * K), expected(T * N);
  cpu::quantizeTensorwise(x.data(), xq.data(), T * K, cpu::Fp8Format::E4M3);
  cpu::quantizeTensorwise(w.data(), wq.data(), N * K, cpu::Fp8Format::E4M3);
  cpu::linearForward(xq.data(), wq.data(), expected.data(), T, K, N);
  expectClose(y.read(), expected, 1e-4f, 1e-5f, "y");
}

// On sm_90: the blockwise recipe's GEMMs on cuBLASLt's block scaling (x by
// 1 x 128 runs, W by 128 x 128 squares, as quantizeFp8Blocks lays out codes
// and scales) equal the CPU's emulation up to the order of the sums, with
// W stored [out, k] (the forward) and [k, out] (the backward's x W). A
// wrong scale layout puts another block's scale on each value: errors of
// the size of the values.
TEST(GemmKernelTest, BlockScaledFp8MatchesTheEmulation) {
  int cc = capability();
  if (cc < 90)
    GTEST_SKIP() << "sm_" << cc << " has no FP8 block scaling";
  const int64_t T = 48, K = 384, N = 256;
  // Magnitudes that differ by row and by block, so each scale matters.
  std::vector<float> x = randomValues(T * K, 6), w = randomValues(N * K, 7);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      x[t * K + k] *= 1.0f + float((t + k / 128) % 5) * 3.0f;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      w[n * K + k] *= 0.01f * (1.0f + float((n / 128 + 2 * (k / 128)) % 4));
  std::vector<float> xq(T * K), wq(N * K), expected(T * N);
  cpu::quantizeBlockwise(x.data(), xq.data(), T, K, 1, 128,
                         cpu::Fp8Format::E4M3);
  cpu::quantizeBlockwise(w.data(), wq.data(), N, K, 128, 128,
                         cpu::Fp8Format::E4M3);
  cpu::linearForward(xq.data(), wq.data(), expected.data(), T, K, N);
  absl::StatusOr<std::unique_ptr<GemmRunner>> runner = GemmRunner::create(cc);
  ASSERT_TRUE(runner.ok()) << runner.status();

  DeviceArray<float> dx(x);
  DeviceArray<uint8_t> qx(T * K);
  DeviceArray<float> sx(gemmScaleCount(GemmScaling::Rows128, T, K));
  Fp8BlockOutputs xOut;
  xOut.codes = qx.get();
  xOut.inverseScales = sx.get();
  xOut.scaling = GemmScaling::Rows128;
  xOut.scaleRows = T;
  ASSERT_TRUE(
      quantizeFp8Blocks(dx.get(), T, K, false, Fp8Format::E4M3, xOut, nullptr)
          .ok());
  GemmSpec blocks = spec(false, true, T, N, K, K, K, N, GemmInput::E4M3);
  blocks.aScaling = GemmScaling::Rows128;
  blocks.bScaling = GemmScaling::Squares128;
  for (bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "W stored [k, out]" : "W stored [out, k]");
    // The stored weight, and the codes the GEMM reads ([out, k] either way).
    std::vector<float> stored = w;
    if (transposed)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          stored[k * N + n] = w[n * K + k];
    DeviceArray<float> dw(stored);
    DeviceArray<uint8_t> qw(N * K);
    DeviceArray<float> sw(gemmScaleCount(GemmScaling::Squares128, N, K));
    Fp8BlockOutputs wOut;
    wOut.codes = qw.get();
    wOut.transpose = transposed;
    wOut.codesLd = K;
    wOut.inverseScales = sw.get();
    wOut.scaling = GemmScaling::Squares128;
    wOut.scaleRows = N;
    ASSERT_TRUE(quantizeFp8Blocks(dw.get(), transposed ? K : N,
                                  transposed ? N : K, true, Fp8Format::E4M3,
                                  wOut, nullptr)
                    .ok());
    DeviceArray<float> y(T * N);
    ASSERT_TRUE((*runner)
                    ->run(blocks, 1.0f, qx.get(), qw.get(), 0.0f, y.get(),
                          nullptr, sx.get(), sw.get())
                    .ok());
    expectClose(y.read(), expected, 1e-4f, 1e-4f, "y");
  }
}

} // namespace
} // namespace moe::rt::cuda
