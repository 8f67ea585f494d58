//===- GemmRunnerTest.cpp - the backend's GEMMs on the virtual GPU --------===//
//
// The CUDA backend's GemmRunner (lib/Runtime/Cuda/Gemm.cpp), unchanged, on
// the virtual GPU's cuBLASLt: its row-major GEMMs mapped onto cuBLASLt's
// column-major ones, its FP8 layouts and scale placement (GemmScaling.h)
// against what cuBLASLt documents, each against a double-precision GEMM of
// the same inputs. Tolerances as CublasLtMatmulTest derives them:
// (k + 8 + kBlocks) 2^-24 sum |a b s| for the fp32 sums, plus the output's
// rounding.
//
//===----------------------------------------------------------------------===//
#include "CublasLtTesting.h"

#include "VirtualGpu/Runtime.h"

#include "moe/Runtime/Cuda/Gemm.h"

#include "gtest/gtest.h"

#include <cmath>
#include <memory>

namespace moe::rt::cuda {
namespace {

using virtual_gpu::testing::DeviceBuffer;
using virtual_gpu::testing::HostMatrix;

cudaDataType_t typeOf(GemmInput input) {
  return input == GemmInput::BF16   ? CUDA_R_16BF
         : input == GemmInput::E4M3 ? CUDA_R_8F_E4M3
                                    : CUDA_R_8F_E5M2;
}

/// A row-major [rows, cols] matrix with row stride `ld`: column-major
/// [cols, rows] to HostMatrix, so (r, c) is at(c, r).
HostMatrix rowMajor(cudaDataType_t type, int64_t rows, int64_t cols,
                    int64_t ld) {
  return HostMatrix(type, cols, rows, ld);
}

class GemmRunnerTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(virtual_gpu::selectDevice("h100").ok());
  }

  /// Runs `spec` on random inputs (scales: `aScales`, `bScales` as the
  /// backend places them) and checks C against the double GEMM.
  void check(const GemmSpec &spec, std::vector<float> aScales = {},
             std::vector<float> bScales = {}) {
    std::mt19937 rng(spec.m * 131 + spec.n * 7 + spec.k);
    bool fp8 = spec.a != GemmInput::BF16;
    HostMatrix a = rowMajor(typeOf(spec.a), spec.transA ? spec.k : spec.m,
                            spec.transA ? spec.m : spec.k, spec.lda);
    HostMatrix b = rowMajor(typeOf(spec.b), spec.transB ? spec.n : spec.k,
                            spec.transB ? spec.k : spec.n, spec.ldb);
    cudaDataType_t cType = spec.c == GemmOutput::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    HostMatrix c = rowMajor(cType, spec.m, spec.n, spec.ldc);
    a.fillRandom(rng, fp8 ? 16.0f : 1.0f);
    b.fillRandom(rng, fp8 ? 16.0f : 1.0f);
    c.fillRandom(rng, 1.0f);
    float alpha = 0.75f, beta = 0.5f;

    auto runner = GemmRunner::create(90);
    ASSERT_TRUE(runner.ok()) << runner.status();
    DeviceBuffer aData(a.bytes.data(), a.bytes.size());
    DeviceBuffer bData(b.bytes.data(), b.bytes.size());
    DeviceBuffer cData(c.bytes.data(), c.bytes.size());
    std::unique_ptr<DeviceBuffer> aScale, bScale;
    if (fp8) {
      aScale = std::make_unique<DeviceBuffer>(aScales.data(), 4 * aScales.size());
      bScale = std::make_unique<DeviceBuffer>(bScales.data(), 4 * bScales.size());
    }
    absl::Status status = (*runner)->run(
        spec, alpha, aData.get(), bData.get(), beta, cData.get(), nullptr,
        fp8 ? static_cast<const float *>(aScale->get()) : nullptr,
        fp8 ? static_cast<const float *>(bScale->get()) : nullptr);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostMatrix d = c;
    cData.read(d.bytes.data(), d.bytes.size());

    auto scaleOf = [&](GemmScaling scaling, const std::vector<float> &scales,
                       int64_t rows, int64_t row, int64_t kk) {
      return fp8 ? scales[gemmScaleIndex(scaling, rows, spec.k, row, kk / 128)]
                 : 1.0f;
    };
    double u = std::ldexp(1.0, -24);
    double uOut = spec.c == GemmOutput::BF16 ? std::ldexp(1.0, -8) : u;
    int64_t kBlocks = (spec.k + 127) / 128;
    int failures = 0;
    for (int64_t i = 0; i < spec.m; ++i)
      for (int64_t j = 0; j < spec.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t kk = 0; kk < spec.k; ++kk) {
          double av = spec.transA ? a.at(i, kk) : a.at(kk, i);
          double bv = spec.transB ? b.at(kk, j) : b.at(j, kk);
          double s = scaleOf(spec.aScaling, aScales, spec.m, i, kk) *
                     scaleOf(spec.bScaling, bScales, spec.n, j, kk);
          sum += av * bv * s;
          magnitude += std::fabs(av * bv * s);
        }
        double ref = alpha * sum + beta * c.at(j, i);
        magnitude = alpha * magnitude + std::fabs(beta * c.at(j, i));
        double tolerance = (spec.k + 8 + kBlocks) * u * magnitude * (1 + uOut) +
                           uOut * std::fabs(ref);
        double got = d.at(j, i);
        if (!(std::fabs(got - ref) <= tolerance) && failures++ < 5)
          ADD_FAILURE() << "C[" << i << ", " << j << "] is " << got
                        << ", expected " << ref << " within " << tolerance;
      }
    EXPECT_EQ(failures, 0);
  }
};

GemmSpec spec(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              GemmInput input, GemmOutput output = GemmOutput::F32) {
  GemmSpec s;
  s.transA = transA, s.transB = transB;
  s.m = m, s.n = n, s.k = k;
  s.lda = transA ? m : k;
  s.ldb = transB ? k : n;
  s.ldc = n;
  s.a = s.b = input;
  s.c = output;
  return s;
}

// A linear layer's three forms: y = x W^T, dx = dy W, dW = dy^T x.
TEST_F(GemmRunnerTest, Bf16LinearLayerForms) {
  for (GemmOutput output : {GemmOutput::F32, GemmOutput::BF16}) {
    check(spec(false, true, 37, 80, 96, GemmInput::BF16, output));
    check(spec(false, false, 37, 96, 80, GemmInput::BF16, output));
    check(spec(true, false, 80, 96, 37, GemmInput::BF16, output));
  }
  // Leading dimensions past the rows, and a strided batch is the
  // descriptors' (GemmDescriptorTest).
  GemmSpec wide = spec(false, true, 12, 20, 48, GemmInput::BF16);
  wide.lda = 64, wide.ldb = 56, wide.ldc = 24;
  check(wide);
}

TEST_F(GemmRunnerTest, Fp8TensorScaled) {
  GemmSpec forward = spec(false, true, 16, 32, 64, GemmInput::E4M3);
  check(forward, {0.5f}, {0.25f});
  forward.b = GemmInput::E5M2;
  forward.c = GemmOutput::BF16;
  check(forward, {2.0f}, {0.125f});
}

// The blockwise recipe: x by 1 x 128 rows, W by 128 x 128 squares, the
// scales where GemmScaling.h puts them.
TEST_F(GemmRunnerTest, Fp8BlockScaled) {
  GemmSpec forward = spec(false, true, 16, 256, 384, GemmInput::E4M3);
  forward.aScaling = GemmScaling::Rows128;
  forward.bScaling = GemmScaling::Squares128;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> scale(0.25f, 4.0f);
  std::vector<float> aScales(gemmScaleCount(GemmScaling::Rows128, 16, 384));
  std::vector<float> bScales(gemmScaleCount(GemmScaling::Squares128, 256, 384));
  for (float &s : aScales)
    s = scale(rng);
  for (float &s : bScales)
    s = scale(rng);
  check(forward, aScales, bScales);
}

} // namespace
} // namespace moe::rt::cuda
