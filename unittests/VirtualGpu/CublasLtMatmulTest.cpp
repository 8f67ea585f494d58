//===- CublasLtMatmulTest.cpp - the virtual GPU's cuBLASLt arithmetic -----===//
//
// cublasLtMatmul on the virtual GPU against a double-precision GEMM of the
// same decoded inputs, for every type combination the CUDA backend uses
// and cuBLASLt's others with fp32 compute, with transposes, leading
// dimensions beyond the rows, strided batches, alpha and beta, FP8 scales
// (tensor-wide and Hopper's block scales), D's scale, amax and saturation.
//
// Tolerance. Each product of decoded inputs is exact in fp32 (8- and
// 16-bit inputs; fp32 inputs multiply-add with one rounding), so a k-long
// fp32 sum is off the exact one by at most gamma_k sum |a b| with
// gamma_k = k u / (1 - k u), u = 2^-24. Block scaling adds one rounding per
// block product and per block sum, the split-k algorithm one for adding
// its halves, and alpha, scales and beta C one each: at most
// (k + 8 + kBlocks) u M in all, M = |alpha| |sA sB| sum |a b| + |beta C|.
// The output rounds once more, to nearest: a relative u_out (2^-24 fp32,
// 2^-8 BF16, 2^-11 FP16, 2^-4 E4M3, 2^-3 E5M2) of the value plus half the
// smallest subnormal of the type. So
//   |D - ref| <= (k + 8 + kBlocks) u M (1 + u_out) + u_out |ref| + floor.
// With k <= 384 that bound is below 2^-15 M for fp32 sums: a kernel that
// accumulated in BF16, dropped a scale or read a wrong element fails it.
//
//===----------------------------------------------------------------------===//
#include "CublasLtTesting.h"

#include "VirtualGpu/Runtime.h"

#include "gtest/gtest.h"

#include <cmath>
#include <ostream>
#include <string>

namespace moe::rt::virtual_gpu::testing {
namespace {

/// Unit roundoff and half the smallest subnormal of an output type.
double outputRoundoff(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_32F:
    return std::ldexp(1.0, -24);
  case CUDA_R_16BF:
    return std::ldexp(1.0, -8);
  case CUDA_R_16F:
    return std::ldexp(1.0, -11);
  case CUDA_R_8F_E4M3:
    return std::ldexp(1.0, -4);
  default:
    return std::ldexp(1.0, -3);
  }
}
double outputFloor(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_16F:
    return std::ldexp(1.0, -25);
  case CUDA_R_8F_E4M3:
    return std::ldexp(1.0, -10);
  case CUDA_R_8F_E5M2:
    return std::ldexp(1.0, -17);
  default:
    return 0.0;
  }
}
double largestFinite(cudaDataType_t type) {
  return type == CUDA_R_8F_E4M3 ? 448.0 : type == CUDA_R_8F_E5M2 ? 57344.0 : INFINITY;
}

/// Where cuBLASLt's documented scale layouts put the scale of row `outer`
/// (of op(A)'s rows or op(B)'s columns) in k block `kBlock`.
size_t scalePosition(int32_t mode, uint64_t outerSize, uint64_t k,
                     uint64_t outer, uint64_t kBlock) {
  uint64_t kBlocks = (k + 127) / 128;
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
    return kBlock * outerSize + outer; // outer innermost
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
    return outer / 128 * ((kBlocks + 3) / 4 * 4) + kBlock; // rows of 4-padded k blocks
  return 0;
}

/// Checks D against the double-precision result; returns the largest
/// |D| before D's scale the reference expects (amax) and its tolerance.
std::pair<double, double> expectMatches(const MatmulCase &cfg,
                                        const HostMatrix &a,
                                        const HostMatrix &b,
                                        const HostMatrix &c,
                                        const MatmulResult &result) {
  uint64_t m = c.rows, n = c.cols, k = cfg.transA ? a.rows : a.cols;
  HostMatrix d(cfg.dType, m, n, c.ld, c.batch, c.stride);
  d.bytes = result.d;
  double u = std::ldexp(1.0, -24), uOut = outputRoundoff(cfg.dType);
  double dScale = cfg.dScale.empty() ? 1.0 : cfg.dScale[0];
  uint64_t kBlocks = (k + 127) / 128;
  double amax = 0, amaxTolerance = 0;
  int failures = 0;
  for (int32_t batch = 0; batch < c.batch; ++batch)
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        double sum = 0, magnitude = 0;
        for (uint64_t kk = 0; kk < k; ++kk) {
          double av = cfg.transA ? a.at(kk, i, batch) : a.at(i, kk, batch);
          double bv = cfg.transB ? b.at(j, kk, batch) : b.at(kk, j, batch);
          double scale = 1;
          if (!cfg.aScales.empty())
            scale *= cfg.aScales[scalePosition(cfg.aScaleMode, m, k, i, kk / 128)];
          if (!cfg.bScales.empty())
            scale *= cfg.bScales[scalePosition(cfg.bScaleMode, n, k, j, kk / 128)];
          sum += av * bv * scale;
          magnitude += std::fabs(av * bv * scale);
        }
        double cv = cfg.beta != 0 ? c.at(i, j, batch) : 0;
        double ref = cfg.alpha * sum + cfg.beta * cv;
        magnitude = std::fabs(cfg.alpha) * magnitude + std::fabs(cfg.beta * cv);
        double fp32 = (k + 8 + kBlocks) * u * magnitude;
        amax = std::max(amax, std::fabs(ref));
        amaxTolerance = std::max(amaxTolerance, fp32);
        double scaled = ref * dScale;
        double limit = largestFinite(cfg.dType);
        double expected = std::max(-limit, std::min(limit, scaled));
        double tolerance = fp32 * dScale * (1 + uOut) +
                           uOut * std::fabs(expected) + outputFloor(cfg.dType);
        double got = d.at(i, j, batch);
        if (!(std::fabs(got - expected) <= tolerance) && failures++ < 5)
          ADD_FAILURE() << "D[" << i << ", " << j << "] of batch " << batch
                        << " is " << got << ", expected " << expected
                        << " within " << tolerance;
      }
  EXPECT_EQ(failures, 0);
  return {amax, amaxTolerance};
}

struct TypeCase {
  cudaDataType_t a, b, c, d;
};

std::string typeName(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_32F:
    return "F32";
  case CUDA_R_16BF:
    return "BF16";
  case CUDA_R_16F:
    return "F16";
  case CUDA_R_8F_E4M3:
    return "E4M3";
  default:
    return "E5M2";
  }
}

void PrintTo(const TypeCase &types, std::ostream *os) {
  *os << typeName(types.a) << " x " << typeName(types.b) << " -> C "
      << typeName(types.c) << ", D " << typeName(types.d);
}

bool isFp8(cudaDataType_t type) {
  return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2;
}

class CublasLtMatmulTest : public ::testing::TestWithParam<TypeCase> {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override { cublasLtDestroy(handle); }
  cublasLtHandle_t handle = nullptr;
};

// Sizes that are no tile's multiple, leading dimensions past the rows,
// two batches with gaps between them; every transpose cuBLASLt allows
// (FP8: TN only), both algorithms (no workspace: the sequential sum).
TEST_P(CublasLtMatmulTest, MatchesADoublePrecisionGemm) {
  TypeCase types = GetParam();
  bool fp8 = isFp8(types.a);
  uint64_t m = fp8 ? 16 : 13, n = fp8 ? 24 : 11, k = fp8 ? 64 : 37;
  // FP8 leading dimensions span multiples of 16 bytes.
  int64_t pad = fp8 ? 16 : 3;
  std::mt19937 rng(46);
  for (bool transA : {false, true})
    for (bool transB : {false, true}) {
      if (fp8 && (!transA || transB))
        continue;
      for (uint64_t workspace : {uint64_t{0}, uint64_t{1} << 20}) {
        SCOPED_TRACE(::testing::Message() << "transA " << transA << " transB "
                                        << transB << " workspace " << workspace);
        uint64_t aRows = transA ? k : m, aCols = transA ? m : k;
        uint64_t bRows = transB ? n : k, bCols = transB ? k : n;
        int64_t lda = aRows + pad, ldb = bRows + pad, ldc = fp8 ? 32 : m + 2;
        // Gaps between the batches; FP8's keep them 16-byte aligned.
        HostMatrix a(types.a, aRows, aCols, lda, 2, lda * aCols + (fp8 ? 16 : 7));
        HostMatrix b(types.b, bRows, bCols, ldb, 2, ldb * bCols + (fp8 ? 16 : 5));
        HostMatrix c(types.c, m, n, ldc, 2, ldc * n + (fp8 ? 16 : 3));
        a.fillRandom(rng, fp8 ? 8.0f : 1.0f);
        b.fillRandom(rng, fp8 ? 8.0f : 1.0f);
        c.fillRandom(rng, 4.0f);
        MatmulCase cfg;
        cfg.transA = transA, cfg.transB = transB;
        cfg.alpha = 1.5f, cfg.beta = -0.75f;
        cfg.dType = types.d;
        cfg.workspaceBytes = workspace;
        if (fp8) {
          cfg.aScales = {0.5f}, cfg.bScales = {0.125f};
          cfg.amax = true;
          if (isFp8(types.d))
            cfg.dScale = {4.0f};
        }
        MatmulResult result = runMatmul(handle, cfg, a, b, c);
        ASSERT_EQ(result.heuristic, CUBLAS_STATUS_SUCCESS);
        ASSERT_EQ(result.matmul, CUBLAS_STATUS_SUCCESS);
        auto [amax, tolerance] = expectMatches(cfg, a, b, c, result);
        if (cfg.amax) {
          EXPECT_NEAR(result.amax, amax, tolerance + amax * 1e-6);
        }
      }
    }
}

// beta 0: C is not read, so poisoned (NaN) C, in place or not, gives
// finite D.
TEST_P(CublasLtMatmulTest, BetaZeroDoesNotReadC) {
  TypeCase types = GetParam();
  bool fp8 = isFp8(types.a);
  uint64_t m = 16, n = 16, k = 32;
  HostMatrix a(types.a, fp8 ? k : m, fp8 ? m : k, fp8 ? k : m);
  HostMatrix b(types.b, k, n, k);
  HostMatrix c(types.c, m, n, 16); // 0xff bytes throughout: NaN
  std::mt19937 rng(7);
  a.fillRandom(rng, 2.0f);
  b.fillRandom(rng, 2.0f);
  MatmulCase cfg;
  cfg.transA = fp8;
  cfg.dType = types.d;
  MatmulResult result = runMatmul(handle, cfg, a, b, c);
  ASSERT_EQ(result.matmul, CUBLAS_STATUS_SUCCESS);
  expectMatches(cfg, a, b, c, result);
}

INSTANTIATE_TEST_SUITE_P(
    CublasLt, CublasLtMatmulTest,
    ::testing::Values(
        // The CUDA backend's: BF16 (and FP8) inputs, fp32 or BF16 out.
        TypeCase{CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F},
        TypeCase{CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF},
        TypeCase{CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F},
        TypeCase{CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F},
        TypeCase{CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF, CUDA_R_16BF},
        // cuBLASLt's others with fp32 compute.
        TypeCase{CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F},
        TypeCase{CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUDA_R_32F},
        TypeCase{CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F},
        TypeCase{CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E4M3},
        TypeCase{CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16F, CUDA_R_8F_E5M2},
        TypeCase{CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F}),
    [](const ::testing::TestParamInfo<TypeCase> &info) {
      return typeName(info.param.a) + "x" + typeName(info.param.b) + "_C" +
             typeName(info.param.c) + "_D" + typeName(info.param.d);
    });

class CublasLtArithmeticTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override { cublasLtDestroy(handle); }
  cublasLtHandle_t handle = nullptr;
};

// The sums are fp32 in the documented order, not wider: 1 followed by 31
// terms of 2^-25 stays 1 summed in order (each term is under half an ulp
// of 1), while the split-k algorithm adds its second half (16 terms,
// 2^-21) to the first (1) and keeps it. A double sum would give neither.
TEST_F(CublasLtArithmeticTest, SumsInFp32InTheDocumentedOrder) {
  HostMatrix a(CUDA_R_16BF, 1, 32, 1), b(CUDA_R_16BF, 32, 1, 32);
  for (uint64_t kk = 0; kk < 32; ++kk) {
    a.set(0, kk, 0, kk == 0 ? 1.0f : std::ldexp(1.0f, -25));
    b.set(kk, 0, 0, 1.0f);
  }
  HostMatrix c(CUDA_R_32F, 1, 1, 1);
  MatmulCase cfg;
  cfg.workspaceBytes = 0;
  MatmulResult sequential = runMatmul(handle, cfg, a, b, c);
  ASSERT_EQ(sequential.matmul, CUBLAS_STATUS_SUCCESS);
  float value;
  std::memcpy(&value, sequential.d.data(), 4);
  EXPECT_EQ(value, 1.0f);
  cfg.workspaceBytes = 1 << 10;
  MatmulResult split = runMatmul(handle, cfg, a, b, c);
  ASSERT_EQ(split.matmul, CUBLAS_STATUS_SUCCESS);
  std::memcpy(&value, split.d.data(), 4);
  EXPECT_EQ(value, 1.0f + std::ldexp(1.0f, -21));
}

// Bit for bit the fp32 sum in k order (the sequential algorithm), for a
// GEMM large enough to be spread over threads.
TEST_F(CublasLtArithmeticTest, SequentialSumsAreExactlyTheFp32KOrderSums) {
  uint64_t m = 64, n = 64, k = 512;
  HostMatrix a(CUDA_R_16BF, m, k, m), b(CUDA_R_16BF, k, n, k);
  std::mt19937 rng(17);
  a.fillRandom(rng, 1.0f);
  b.fillRandom(rng, 1.0f);
  HostMatrix c(CUDA_R_32F, m, n, m);
  MatmulCase cfg;
  cfg.workspaceBytes = 0;
  MatmulResult result = runMatmul(handle, cfg, a, b, c);
  ASSERT_EQ(result.matmul, CUBLAS_STATUS_SUCCESS);
  HostMatrix d(CUDA_R_32F, m, n, m);
  d.bytes = result.d;
  int mismatches = 0;
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      float sum = 0.0f;
      for (uint64_t kk = 0; kk < k; ++kk)
        sum += a.at(i, kk) * b.at(kk, j); // exact products
      mismatches += d.at(i, j) != sum;
    }
  EXPECT_EQ(mismatches, 0);
}

// D's scale maps onto the FP8 range; what lands beyond it saturates to the
// largest finite value (not NaN); amax is taken before the scale.
TEST_F(CublasLtArithmeticTest, Fp8OutputSaturatesAfterDScale) {
  uint64_t m = 16, n = 16, k = 16;
  HostMatrix a(CUDA_R_8F_E4M3, k, m, k), b(CUDA_R_8F_E4M3, k, n, k);
  std::mt19937 rng(3);
  a.fillRandom(rng, 4.0f);
  b.fillRandom(rng, 4.0f);
  HostMatrix c(CUDA_R_16BF, m, n, m);
  MatmulCase cfg;
  cfg.transA = true;
  cfg.dType = CUDA_R_8F_E4M3;
  cfg.aScales = {1.0f}, cfg.bScales = {1.0f};
  cfg.dScale = {64.0f}; // sums reach ~100: scaled, far past 448
  cfg.amax = true;
  MatmulResult result = runMatmul(handle, cfg, a, b, c);
  ASSERT_EQ(result.matmul, CUBLAS_STATUS_SUCCESS);
  auto [amax, tolerance] = expectMatches(cfg, a, b, c, result);
  EXPECT_GT(amax * 64, 448.0);
  EXPECT_NEAR(result.amax, amax, tolerance + amax * 1e-6);
  HostMatrix d(CUDA_R_8F_E4M3, m, n, m);
  d.bytes = result.d;
  int saturated = 0;
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      EXPECT_FALSE(std::isnan(d.at(i, j)));
      saturated += std::fabs(d.at(i, j)) == 448.0f;
    }
  EXPECT_GT(saturated, 0);
}

// Hopper's block scaling, as the backend's blockwise recipe uses it (A, the
// weight, by 128 x 128 squares; B, the activation, by 1 x 128 rows) and
// both by rows. The scales' padding holds NaN: reading it would show.
TEST_F(CublasLtArithmeticTest, Fp8BlockScales) {
  uint64_t m = 160, n = 8, k = 384;
  for (int32_t aMode : {CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                        CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F}) {
    SCOPED_TRACE(aMode);
    HostMatrix a(CUDA_R_8F_E4M3, k, m, k), b(CUDA_R_8F_E4M3, k, n, k);
    std::mt19937 rng(11);
    a.fillRandom(rng, 16.0f);
    b.fillRandom(rng, 16.0f);
    HostMatrix c(CUDA_R_32F, m, n, m);
    MatmulCase cfg;
    cfg.transA = true;
    cfg.aScaleMode = aMode;
    cfg.bScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    std::uniform_real_distribution<float> scale(0.25f, 4.0f);
    // BLK128x128: 2 rows of 3 k blocks padded to 4.
    size_t aCount = aMode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? 3 * m : 2 * 4;
    cfg.aScales.assign(aCount, NAN);
    for (uint64_t row = 0; row < m; ++row)
      for (uint64_t kBlock = 0; kBlock < 3; ++kBlock)
        cfg.aScales[scalePosition(aMode, m, k, row, kBlock)] = scale(rng);
    cfg.bScales.resize(3 * n);
    for (float &s : cfg.bScales)
      s = scale(rng);
    for (uint64_t workspace : {uint64_t{0}, uint64_t{1} << 20}) {
      cfg.workspaceBytes = workspace;
      MatmulResult result = runMatmul(handle, cfg, a, b, c);
      ASSERT_EQ(result.heuristic, CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(result.matmul, CUBLAS_STATUS_SUCCESS);
      expectMatches(cfg, a, b, c, result);
    }
  }
}

// Device pointer mode reads alpha and beta when the matmul runs.
TEST_F(CublasLtArithmeticTest, DevicePointerModeReadsAlphaAndBetaOnTheDevice) {
  HostMatrix a(CUDA_R_16BF, 4, 8, 4), b(CUDA_R_16BF, 8, 4, 8);
  HostMatrix c(CUDA_R_32F, 4, 4, 4);
  std::mt19937 rng(5);
  a.fillRandom(rng, 1.0f);
  b.fillRandom(rng, 1.0f);
  c.fillRandom(rng, 1.0f);
  cublasLtMatmulDesc_t op;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE,
                                           &mode, sizeof(mode)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t aLayout, bLayout, cLayout;
  cublasLtMatrixLayoutCreate(&aLayout, CUDA_R_16BF, 4, 8, 4);
  cublasLtMatrixLayoutCreate(&bLayout, CUDA_R_16BF, 8, 4, 8);
  cublasLtMatrixLayoutCreate(&cLayout, CUDA_R_32F, 4, 4, 4);
  float scalars[2] = {2.0f, 0.5f};
  DeviceBuffer alphaBeta(scalars, sizeof(scalars));
  DeviceBuffer aData(a.bytes.data(), a.bytes.size());
  DeviceBuffer bData(b.bytes.data(), b.bytes.size());
  DeviceBuffer cData(c.bytes.data(), c.bytes.size());
  const float *alpha = static_cast<const float *>(alphaBeta.get());
  ASSERT_EQ(cublasLtMatmul(handle, op, alpha, aData.get(), aLayout,
                           bData.get(), bLayout, alpha + 1, cData.get(),
                           cLayout, cData.get(), cLayout, nullptr, nullptr, 0,
                           nullptr),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  MatmulResult result;
  result.d.resize(c.bytes.size());
  cData.read(result.d.data(), result.d.size());
  MatmulCase cfg;
  cfg.alpha = 2.0f, cfg.beta = 0.5f;
  expectMatches(cfg, a, b, c, result);
  cublasLtMatrixLayoutDestroy(aLayout);
  cublasLtMatrixLayoutDestroy(bLayout);
  cublasLtMatrixLayoutDestroy(cLayout);
  cublasLtMatmulDescDestroy(op);
}

} // namespace
} // namespace moe::rt::virtual_gpu::testing
