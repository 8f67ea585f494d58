//===- GemmDescriptorTest.cpp - cuBLASLt descriptors, built on the CPU ----===//
//
// cuBLASLt builds its descriptors without a device, so what the CUDA
// backend asks of it is checked on every machine: the row-major to
// column-major mapping, types, transposes, batches, FP8 scales and the
// A100's BF16 fallback. Running GEMMs is test/gpu's.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cuda/Device.h"
#include "moe/Runtime/Cuda/Gemm.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <map>

namespace moe::rt::cuda {
namespace {

using ::testing::HasSubstr;

struct Layout {
  uint32_t type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

Layout layoutOf(cublasLtMatrixLayout_t layout) {
  Layout l;
  size_t written = 0;
  EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_TYPE,
                                             &l.type, sizeof(l.type), &written),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &l.rows,
                                   sizeof(l.rows), &written);
  cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &l.cols,
                                   sizeof(l.cols), &written);
  cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_LD, &l.ld,
                                   sizeof(l.ld), &written);
  cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                   &l.batch, sizeof(l.batch), &written);
  cublasLtMatrixLayoutGetAttribute(layout,
                                   CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                   &l.stride, sizeof(l.stride), &written);
  return l;
}

template <typename T>
T attributeOf(cublasLtMatmulDesc_t operation,
              cublasLtMatmulDescAttributes_t attribute) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(operation, attribute, &value,
                                           sizeof(value), &written),
            CUBLAS_STATUS_SUCCESS);
  return value;
}

/// y[m, n] = x[m, k] W[n, k]^T, the forward of a linear layer.
GemmSpec linearForward(int64_t m, int64_t n, int64_t k, GemmInput input) {
  GemmSpec spec;
  spec.transB = true;
  spec.m = m, spec.n = n, spec.k = k;
  spec.lda = k, spec.ldb = k, spec.ldc = n;
  spec.a = spec.b = input;
  return spec;
}

TEST(GemmDescriptorTest, Bf16RowMajorRunsAsTheColumnMajorTranspose) {
  // C[m, n] = A[m, k] B[k, n]: cuBLASLt computes C^T [n, m] = B^T A^T, its
  // first matrix B stored as column-major [n, k], its second A as [k, m].
  GemmSpec spec;
  spec.m = 3, spec.n = 5, spec.k = 7;
  spec.lda = 7, spec.ldb = 5, spec.ldc = 5;
  auto d = GemmDescriptors::create(spec, 90);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE((*d)->fp8());
  Layout first = layoutOf((*d)->first()), second = layoutOf((*d)->second());
  Layout c = layoutOf((*d)->c());
  EXPECT_EQ(first.type, CUDA_R_16BF);
  EXPECT_EQ(first.rows, 5u);
  EXPECT_EQ(first.cols, 7u);
  EXPECT_EQ(first.ld, 5);
  EXPECT_EQ(second.type, CUDA_R_16BF);
  EXPECT_EQ(second.rows, 7u);
  EXPECT_EQ(second.cols, 3u);
  EXPECT_EQ(second.ld, 7);
  EXPECT_EQ(c.type, CUDA_R_32F);
  EXPECT_EQ(c.rows, 5u);
  EXPECT_EQ(c.cols, 3u);
  EXPECT_EQ(c.ld, 5);
  cublasLtMatmulDesc_t op = (*d)->operation();
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_OP_N);
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSB), CUBLAS_OP_N);
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE),
            CUBLAS_COMPUTE_32F);
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_SCALE_TYPE),
            CUDA_R_32F);
}

TEST(GemmDescriptorTest, TransposesMapOntoTheOtherMatrix) {
  // dW[n, k] = dy[m, n]^T x[m, k]: op(A) = A^T is cuBLASLt's second
  // matrix transposed.
  GemmSpec spec;
  spec.transA = true;
  spec.m = 4, spec.n = 6, spec.k = 8;
  spec.lda = 4, spec.ldb = 6, spec.ldc = 6;
  auto d = GemmDescriptors::create(spec, 80);
  ASSERT_TRUE(d.ok()) << d.status();
  GemmLayouts layouts = gemmLayouts(spec);
  EXPECT_FALSE(layouts.transFirst);
  EXPECT_TRUE(layouts.transSecond);
  Layout second = layoutOf((*d)->second());
  EXPECT_EQ(second.rows, 4u); // A stored [k, m] is column-major [m, k]
  EXPECT_EQ(second.cols, 8u);
  cublasLtMatmulDesc_t op = (*d)->operation();
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_OP_N);
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSB), CUBLAS_OP_T);

  auto forward = GemmDescriptors::create(linearForward(16, 32, 64, GemmInput::BF16), 90);
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_EQ(attributeOf<int32_t>((*forward)->operation(),
                                 CUBLASLT_MATMUL_DESC_TRANSA),
            CUBLAS_OP_T);
  Layout w = layoutOf((*forward)->first());
  EXPECT_EQ(w.rows, 64u); // W stored [n, k] is column-major [k, n]
  EXPECT_EQ(w.cols, 32u);
}

TEST(GemmDescriptorTest, StridedBatches) {
  // One GEMM per expert: [E] x (x_e [m, k] W_e [n, k]^T).
  GemmSpec spec = linearForward(16, 32, 64, GemmInput::BF16);
  spec.batch = 4;
  spec.strideA = 16 * 64, spec.strideB = 32 * 64, spec.strideC = 16 * 32;
  auto d = GemmDescriptors::create(spec, 90);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(layoutOf((*d)->first()).batch, 4);
  EXPECT_EQ(layoutOf((*d)->first()).stride, 32 * 64);
  EXPECT_EQ(layoutOf((*d)->second()).stride, 16 * 64);
  EXPECT_EQ(layoutOf((*d)->c()).stride, 16 * 32);
}

TEST(GemmDescriptorTest, Fp8OnHopperTakesScalePointers) {
  GemmSpec spec = linearForward(16, 32, 64, GemmInput::E4M3);
  spec.b = GemmInput::E5M2;
  auto d = GemmDescriptors::create(spec, 90);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE((*d)->fp8());
  EXPECT_EQ(layoutOf((*d)->first()).type, CUDA_R_8F_E5M2); // B
  EXPECT_EQ(layoutOf((*d)->second()).type, CUDA_R_8F_E4M3); // A
  EXPECT_EQ(layoutOf((*d)->c()).type, CUDA_R_32F);
  cublasLtMatmulDesc_t op = (*d)->operation();
  EXPECT_EQ(attributeOf<int8_t>(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM), 0);
  // Device pointers are only stored here.
  const float *aScale = reinterpret_cast<const float *>(0x1000);
  const float *bScale = reinterpret_cast<const float *>(0x2000);
  ASSERT_TRUE((*d)->setScales(aScale, bScale).ok());
  EXPECT_EQ(attributeOf<const void *>(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER),
            bScale);
  EXPECT_EQ(attributeOf<const void *>(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER),
            aScale);
  EXPECT_THAT((*d)->setScales(aScale, nullptr).message(),
              HasSubstr("needs the scales of both inputs"));
}

// The blockwise recipe on Hopper: the activation (our A, cuBLASLt's B) by
// 1 x 128 rows, the weight (our B, cuBLASLt's A) by 128 x 128 squares.
TEST(GemmDescriptorTest, BlockScalingSetsTheScaleModes) {
  GemmSpec spec = linearForward(16, 256, 384, GemmInput::E4M3);
  spec.aScaling = GemmScaling::Rows128;
  spec.bScaling = GemmScaling::Squares128;
  auto d = GemmDescriptors::create(spec, 90);
  ASSERT_TRUE(d.ok()) << d.status();
  cublasLtMatmulDesc_t op = (*d)->operation();
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE),
            CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
  EXPECT_EQ(attributeOf<int32_t>(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE),
            CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
  // Per-tensor FP8 keeps scalar scales.
  auto tensorwise =
      GemmDescriptors::create(linearForward(16, 32, 64, GemmInput::E4M3), 90);
  ASSERT_TRUE(tensorwise.ok());
  EXPECT_EQ(attributeOf<int32_t>((*tensorwise)->operation(),
                                 CUBLASLT_MATMUL_DESC_A_SCALE_MODE),
            CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
  // A different scaling is a different plan.
  EXPECT_FALSE(spec == linearForward(16, 256, 384, GemmInput::E4M3));

  // The scale arrays: rows innermost for 1 x 128 blocks; squares by rows
  // of k blocks padded to a multiple of 4.
  EXPECT_EQ(gemmScaleCount(GemmScaling::Rows128, 16, 384), 3 * 16);
  EXPECT_EQ(gemmScaleIndex(GemmScaling::Rows128, 16, 384, 5, 2), 2 * 16 + 5);
  EXPECT_EQ(gemmScaleCount(GemmScaling::Squares128, 256, 384), 2 * 4);
  EXPECT_EQ(gemmScaleIndex(GemmScaling::Squares128, 256, 384, 200, 2), 4 + 2);
  EXPECT_EQ(gemmScaleCount(GemmScaling::Squares128, 130, 640), 2 * 8);
  EXPECT_EQ(gemmScaleCount(GemmScaling::Tensor, 130, 640), 1);
}

TEST(GemmDescriptorTest, Fp8OnTheA100RunsInBf16) {
  EXPECT_EQ(effectiveInput(GemmInput::E4M3, 80), GemmInput::BF16);
  EXPECT_EQ(effectiveInput(GemmInput::E4M3, 89), GemmInput::E4M3);
  EXPECT_EQ(effectiveInput(GemmInput::BF16, 90), GemmInput::BF16);
  auto d = GemmDescriptors::create(linearForward(16, 32, 64, GemmInput::E4M3), 80);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE((*d)->fp8());
  EXPECT_EQ((*d)->spec().a, GemmInput::BF16);
  EXPECT_EQ(layoutOf((*d)->first()).type, CUDA_R_16BF);
  EXPECT_THAT((*d)->setScales(nullptr, nullptr).message(),
              HasSubstr("a bf16 GEMM has no dequantization scales"));
}

TEST(GemmDescriptorTest, RefusesWhatCublasLtCannotRun) {
  auto error = [](GemmSpec spec) {
    auto d = GemmDescriptors::create(spec, 90);
    EXPECT_FALSE(d.ok());
    return d.ok() ? std::string() : std::string(d.status().message());
  };
  GemmSpec spec = linearForward(16, 32, 64, GemmInput::E4M3);
  spec.transB = false;
  spec.ldb = 32;
  EXPECT_THAT(error(spec), HasSubstr("fp8 GEMMs take op(A) = A and op(B) = B^T"));
  spec = linearForward(16, 32, 40, GemmInput::E4M3);
  EXPECT_THAT(error(spec), HasSubstr("multiples of 16"));
  spec = linearForward(16, 32, 64, GemmInput::E5M2);
  EXPECT_THAT(error(spec), HasSubstr("no e5m2 x e5m2 GEMM"));
  spec = linearForward(16, 32, 64, GemmInput::E4M3);
  spec.b = GemmInput::BF16;
  EXPECT_THAT(error(spec), HasSubstr("read both inputs in fp8"));
  spec = linearForward(16, 32, 64, GemmInput::BF16);
  spec.lda = 10;
  EXPECT_THAT(error(spec), HasSubstr("leading dimensions 10, 64, 32 must be at "
                                     "least the rows 64, 64, 32"));
  spec = linearForward(0, 32, 64, GemmInput::BF16);
  EXPECT_THAT(error(spec), HasSubstr("sizes must be positive"));
  spec = linearForward(16, 32, 64, GemmInput::BF16);
  spec.batch = 0;
  EXPECT_THAT(error(spec), HasSubstr("batch must be >= 1"));
  // Block scaling: both inputs, e4m3, A by rows, m and n multiples of 4.
  spec = linearForward(16, 32, 64, GemmInput::E4M3);
  spec.aScaling = GemmScaling::Rows128;
  EXPECT_THAT(error(spec), HasSubstr("both inputs or neither"));
  spec.bScaling = GemmScaling::Squares128;
  spec.b = GemmInput::E5M2;
  EXPECT_THAT(error(spec), HasSubstr("read e4m3 inputs"));
  spec.b = GemmInput::E4M3;
  spec.aScaling = GemmScaling::Squares128;
  EXPECT_THAT(error(spec), HasSubstr("takes A (the activation) by rows"));
  spec = linearForward(18, 32, 64, GemmInput::E4M3);
  spec.aScaling = GemmScaling::Rows128;
  spec.bScaling = GemmScaling::Squares128;
  EXPECT_THAT(error(spec), HasSubstr("multiples of 4"));
}

TEST(GemmDescriptorTest, ShapesKeyThePlanCache) {
  std::map<GemmSpec, int> plans;
  plans[linearForward(16, 32, 64, GemmInput::BF16)] = 1;
  plans[linearForward(16, 32, 64, GemmInput::BF16)] = 2;
  plans[linearForward(16, 32, 64, GemmInput::E4M3)] = 3;
  plans[linearForward(32, 32, 64, GemmInput::BF16)] = 4;
  GemmSpec bf16Out = linearForward(16, 32, 64, GemmInput::BF16);
  bf16Out.c = GemmOutput::BF16;
  plans[bf16Out] = 5;
  EXPECT_EQ(plans.size(), 4u);
  EXPECT_EQ(plans[linearForward(16, 32, 64, GemmInput::BF16)], 2);
}

// A BF16 consumer's GEMM writes BF16 (cuBLASLt's epilogue rounds the fp32
// sums): C and D are BF16 matrices of C's shape; the sums stay fp32.
TEST(GemmDescriptorTest, Bf16OutputsAreBf16Matrices) {
  for (GemmInput input : {GemmInput::BF16, GemmInput::E4M3}) {
    GemmSpec spec = linearForward(16, 32, 64, input);
    spec.c = GemmOutput::BF16;
    auto d = GemmDescriptors::create(spec, 90);
    ASSERT_TRUE(d.ok()) << d.status();
    Layout c = layoutOf((*d)->c());
    EXPECT_EQ(c.type, CUDA_R_16BF);
    EXPECT_EQ(c.rows, 32u);
    EXPECT_EQ(c.cols, 16u);
    EXPECT_EQ(c.ld, 32);
    EXPECT_EQ(attributeOf<int32_t>((*d)->operation(),
                                   CUBLASLT_MATMUL_DESC_COMPUTE_TYPE),
              CUBLAS_COMPUTE_32F);
  }
  auto fp32 = GemmDescriptors::create(linearForward(16, 32, 64, GemmInput::BF16), 90);
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(layoutOf((*fp32)->c()).type, CUDA_R_32F);
}

// Without a GPU (CI, this machine) the backend says so instead of failing
// inside a call.
TEST(GemmDescriptorTest, WithoutADeviceErrorsNameTheReason) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = listDevices();
  if (devices.ok())
    GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THAT(devices.status().message(), HasSubstr("no CUDA device"));
  absl::StatusOr<std::unique_ptr<GemmRunner>> runner = GemmRunner::create(90);
  ASSERT_FALSE(runner.ok());
  EXPECT_THAT(runner.status().message(), HasSubstr("cublasLtCreate"));
}

} // namespace
} // namespace moe::rt::cuda
