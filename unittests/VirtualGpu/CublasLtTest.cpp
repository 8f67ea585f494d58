//===- CublasLtTest.cpp - the virtual GPU's cuBLASLt: what it refuses -----===//
//
// The descriptors keep their attributes as cublasLt.h documents them, and
// the heuristic and cublasLtMatmul refuse, with the documented status and a
// message naming the cause, each requirement cuBLASLt states: alignment,
// FP8's TN layout and multiples of 16, its device, block scaling's
// combinations, the workspace an algorithm needs, and any attribute the
// emulation does not implement. The arithmetic is CublasLtMatmulTest's.
//
//===----------------------------------------------------------------------===//
#include "CublasLtTesting.h"

#include "VirtualGpu/CublasLt.h"
#include "VirtualGpu/Runtime.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <memory>

namespace moe::rt::virtual_gpu::testing {
namespace {

using ::testing::HasSubstr;
using cublaslt::lastCublasLtError;

TEST(CublasLtStatusTest, NamesAndDescribesEachStatus) {
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
               "CUBLAS_STATUS_INVALID_VALUE");
  // 31: no status, but within the enum's values (UBSan holds tests to that).
  EXPECT_STREQ(cublasLtGetStatusName(static_cast<cublasStatus_t>(31)),
               "CUBLAS_STATUS_UNKNOWN");
  EXPECT_THAT(cublasLtGetStatusString(CUBLAS_STATUS_ARCH_MISMATCH),
              HasSubstr("does not support"));
}

TEST(CublasLtDescriptorTest, AttributesKeepTheirDocumentedTypesAndDefaults) {
  cublasLtMatmulDesc_t op;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  int32_t value = -1;
  size_t written = 0;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA,
                                           &value, sizeof(value), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(value, CUBLAS_OP_N);
  EXPECT_EQ(written, sizeof(int32_t));
  uint32_t epilogue = 0;
  cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                 sizeof(epilogue), &written);
  EXPECT_EQ(epilogue, CUBLASLT_EPILOGUE_DEFAULT);
  // Exactly the documented size (FAST_ACCUM is an int8_t).
  int32_t wide = 1;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                           &wide, sizeof(wide)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(),
              HasSubstr("CUBLASLT_MATMUL_DESC_FAST_ACCUM takes 1 bytes"));
  int8_t fast = 0;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                           &fast, sizeof(fast)),
            CUBLAS_STATUS_SUCCESS);
  const void *pointer = reinterpret_cast<const void *>(0x1000);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                 &pointer, sizeof(pointer));
  const void *back = nullptr;
  cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                 &back, sizeof(back), &written);
  EXPECT_EQ(back, pointer);
  // A size query.
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,
                                           nullptr, 0, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(void *));
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                op, static_cast<cublasLtMatmulDescAttributes_t>(9), &value,
                sizeof(value)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescDestroy(op), CUBLAS_STATUS_SUCCESS);
  // A destroyed descriptor is not one.
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA,
                                           &value, sizeof(value), &written),
            CUBLAS_STATUS_INVALID_VALUE);

  cublasLtMatrixLayout_t layout;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 3, 5, 7),
            CUBLAS_STATUS_SUCCESS);
  uint64_t rows = 0;
  int32_t batch = 0;
  cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows,
                                   sizeof(rows), &written);
  cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                   &batch, sizeof(batch), &written);
  EXPECT_EQ(rows, 3u);
  EXPECT_EQ(batch, 1);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_INVALID_VALUE);

  cublasLtMatmulPreference_t preference;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  uint32_t alignment = 0;
  cublasLtMatmulPreferenceGetAttribute(preference,
                                       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &alignment, sizeof(alignment), &written);
  EXPECT_EQ(alignment, 256u);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(preference), CUBLAS_STATUS_SUCCESS);
}

/// The descriptors of one matmul, for the heuristic and cublasLtMatmul.
struct Descriptors {
  Descriptors(const Descriptors &) = delete;
  Descriptors &operator=(const Descriptors &) = delete;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;

  /// op(A) [m, k] op(B) [k, n], A and B of `in`, C and D of `out`, tight
  /// leading dimensions.
  Descriptors(cudaDataType_t in, cudaDataType_t out, uint64_t m, uint64_t n,
              uint64_t k, bool transA, bool transB) {
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int32_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, opA);
    set(CUBLASLT_MATMUL_DESC_TRANSB, opB);
    cublasLtMatrixLayoutCreate(&a, in, transA ? k : m, transA ? m : k,
                               transA ? k : m);
    cublasLtMatrixLayoutCreate(&b, in, transB ? n : k, transB ? k : n,
                               transB ? n : k);
    cublasLtMatrixLayoutCreate(&c, out, m, n, m);
    cublasLtMatrixLayoutCreate(&d, out, m, n, m);
    cublasLtMatmulPreferenceCreate(&preference);
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{1} << 20);
  }
  ~Descriptors() {
    cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t layout : {a, b, c, d})
      cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulDescDestroy(op);
  }
  template <typename T> void set(cublasLtMatmulDescAttributes_t attribute, T value) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)),
              CUBLAS_STATUS_SUCCESS);
  }
  template <typename T>
  void prefer(cublasLtMatmulPreferenceAttributes_t attribute, T value) {
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value,
                                                   sizeof(value)),
              CUBLAS_STATUS_SUCCESS);
  }
  /// Asks for up to 2 algorithms; returns the status, `count` them.
  cublasStatus_t heuristic(cublasLtHandle_t handle, int &count,
                           cublasLtMatmulHeuristicResult_t *results) {
    return cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, d, preference, 2,
                                          results, &count);
  }
};

class CublasLtTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override { cublasLtDestroy(handle); }

  /// The heuristic's status, expecting no algorithm unless it succeeds.
  cublasStatus_t heuristic(Descriptors &descriptors) {
    cublasLtMatmulHeuristicResult_t results[2];
    int count = -1;
    cublasStatus_t status = descriptors.heuristic(handle, count, results);
    if (status != CUBLAS_STATUS_SUCCESS) {
      EXPECT_EQ(count, 0);
    }
    return status;
  }
  cublasLtHandle_t handle = nullptr;
};

Descriptors fp8Forward(uint64_t m, uint64_t n, uint64_t k) {
  return Descriptors(CUDA_R_8F_E4M3, CUDA_R_32F, m, n, k, true, false);
}

TEST_F(CublasLtTest, HeuristicRefusesMisalignment) {
  // FP8 needs 16-byte aligned matrices.
  Descriptors fp8 = fp8Forward(16, 16, 32);
  fp8.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t{8});
  EXPECT_EQ(heuristic(fp8), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("no algorithm for B aligned to 8 "
                                             "bytes"));
  // BF16 its element's 2 bytes; a leading dimension of 3 keeps columns at 2.
  Descriptors bf16(CUDA_R_16BF, CUDA_R_32F, 3, 4, 5, false, false);
  bf16.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{1});
  EXPECT_EQ(heuristic(bf16), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("A aligned to 1 bytes"));
  bf16.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{2});
  EXPECT_EQ(heuristic(bf16), CUBLAS_STATUS_SUCCESS);
  // k = 40, which FP8 leading dimensions of 40 bytes cannot take either.
  Descriptors ld(CUDA_R_8F_E4M3, CUDA_R_32F, 16, 16, 40, true, false);
  EXPECT_EQ(heuristic(ld), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(CublasLtTest, HeuristicRefusesFp8OutsideItsRequirements) {
  Descriptors nn(CUDA_R_8F_E4M3, CUDA_R_32F, 16, 16, 32, false, false);
  EXPECT_EQ(heuristic(nn), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("TN format"));
  // k = 24: leading dimensions of 32 keep the layout's 16 bytes.
  Descriptors k24 = fp8Forward(16, 16, 24);
  cublasLtMatrixLayoutDestroy(k24.a);
  cublasLtMatrixLayoutDestroy(k24.b);
  cublasLtMatrixLayoutCreate(&k24.a, CUDA_R_8F_E4M3, 24, 16, 32);
  cublasLtMatrixLayoutCreate(&k24.b, CUDA_R_8F_E4M3, 24, 16, 32);
  EXPECT_EQ(heuristic(k24), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("k to be a multiple of 16, found 24"));
  Descriptors e5m2(CUDA_R_8F_E5M2, CUDA_R_32F, 16, 16, 32, true, false);
  EXPECT_EQ(heuristic(e5m2), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("no matmul of A CUDA_R_8F_E5M2"));
  // C's rows span 16 bytes: 6 BF16 rows do not.
  Descriptors rows(CUDA_R_8F_E4M3, CUDA_R_16BF, 6, 16, 32, true, false);
  EXPECT_EQ(heuristic(rows), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(CublasLtTest, HeuristicRefusesFp8OnTheA100) {
  ASSERT_TRUE(selectDevice("a100").ok());
  cublasLtHandle_t a100 = nullptr;
  ASSERT_EQ(cublasLtCreate(&a100), CUBLAS_STATUS_SUCCESS);
  ASSERT_TRUE(selectDevice("h100").ok());
  Descriptors fp8 = fp8Forward(16, 16, 32);
  cublasLtMatmulHeuristicResult_t results[2];
  int count = -1;
  EXPECT_EQ(fp8.heuristic(a100, count, results), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("need sm_89 or later; a100 is sm_80"));
  // BF16 runs there.
  Descriptors bf16(CUDA_R_16BF, CUDA_R_32F, 16, 16, 32, true, false);
  EXPECT_EQ(bf16.heuristic(a100, count, results), CUBLAS_STATUS_SUCCESS);
  cublasLtDestroy(a100);
}

TEST_F(CublasLtTest, HeuristicRefusesUnsupportedTypes) {
  Descriptors mixed(CUDA_R_16BF, CUDA_R_32F, 8, 8, 8, false, false);
  cublasLtMatrixLayoutDestroy(mixed.b);
  cublasLtMatrixLayoutCreate(&mixed.b, CUDA_R_16F, 8, 8, 8);
  EXPECT_EQ(heuristic(mixed), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("no matmul of A CUDA_R_16BF, B "
                                             "CUDA_R_16F"));
  Descriptors fp32ToBf16(CUDA_R_32F, CUDA_R_16BF, 8, 8, 8, false, false);
  EXPECT_EQ(heuristic(fp32ToBf16), CUBLAS_STATUS_NOT_SUPPORTED);
  Descriptors computeType(CUDA_R_16BF, CUDA_R_32F, 8, 8, 8, false, false);
  int32_t fast = CUBLAS_COMPUTE_32F_FAST_TF32;
  computeType.set(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, fast);
  EXPECT_EQ(heuristic(computeType), CUBLAS_STATUS_NOT_SUPPORTED);
  // Shapes that disagree are invalid, not unsupported.
  Descriptors shapes(CUDA_R_16BF, CUDA_R_32F, 8, 8, 8, false, false);
  cublasLtMatrixLayoutDestroy(shapes.b);
  cublasLtMatrixLayoutCreate(&shapes.b, CUDA_R_16BF, 9, 8, 9);
  EXPECT_EQ(heuristic(shapes), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("op(A) is 8 x 8 but op(B) is 9 x 8"));
}

TEST_F(CublasLtTest, HeuristicRefusesUnsupportedBlockScaling) {
  Descriptors both = fp8Forward(16, 16, 128);
  both.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
           int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F});
  both.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
           int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F});
  EXPECT_EQ(heuristic(both), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("cannot both take 128 x 128"));
  Descriptors one = fp8Forward(16, 16, 128);
  one.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
          int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F});
  EXPECT_EQ(heuristic(one), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("both A and B or neither"));
  Descriptors mx = fp8Forward(16, 16, 128);
  mx.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
         int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0});
  EXPECT_EQ(heuristic(mx), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(),
              HasSubstr("CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 2 is not implemented"));
}

// The algorithm that uses the workspace comes first where it fits; with
// less workspace the heuristic offers only what needs none, and an
// algorithm given less workspace than it needs is refused.
TEST_F(CublasLtTest, WorkspaceDecidesTheAlgorithms) {
  Descriptors bf16(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  cublasLtMatmulHeuristicResult_t results[2];
  int count = 0;
  ASSERT_EQ(bf16.heuristic(handle, count, results), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(count, 2);
  EXPECT_EQ(results[0].workspaceSize, 2u * 16 * 8 * 4);
  EXPECT_EQ(results[1].workspaceSize, 0u);
  bf16.prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{1000});
  cublasLtMatmulHeuristicResult_t small[2];
  ASSERT_EQ(bf16.heuristic(handle, count, small), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(count, 1);
  EXPECT_EQ(small[0].workspaceSize, 0u);

  DeviceBuffer a(16 * 64 * 2), b(8 * 64 * 2), c(16 * 8 * 4), workspace(1024);
  float alpha = 1, beta = 0;
  EXPECT_EQ(cublasLtMatmul(handle, bf16.op, &alpha, a.get(), bf16.a, b.get(),
                           bf16.b, &beta, c.get(), bf16.c, c.get(), bf16.d,
                           &results[0].algo, workspace.get(), 1000, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(),
              HasSubstr("needs 1024 bytes of workspace, given 1000"));
}

TEST_F(CublasLtTest, MatmulRefusesPointersLessAlignedThanItsAlgorithm) {
  Descriptors bf16(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  cublasLtMatmulHeuristicResult_t results[2];
  int count = 0;
  ASSERT_EQ(bf16.heuristic(handle, count, results), CUBLAS_STATUS_SUCCESS);
  DeviceBuffer a(16 * 64 * 2 + 2), b(8 * 64 * 2), c(16 * 8 * 4), workspace(1024);
  float alpha = 1, beta = 0;
  const char *shifted = static_cast<const char *>(a.get()) + 2;
  EXPECT_EQ(cublasLtMatmul(handle, bf16.op, &alpha, shifted, bf16.a, b.get(),
                           bf16.b, &beta, c.get(), bf16.c, c.get(), bf16.d,
                           &results[1].algo, workspace.get(), 1024, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(),
              HasSubstr("is aligned to 2 bytes; the algorithm assumes 16"));
  // An algorithm for other types is not one for this matmul. (Operands
  // sized for fp32, so that the refusal cannot be an overlap of the BF16
  // buffers above instead, which depends on where they were placed.)
  Descriptors fp32(CUDA_R_32F, CUDA_R_32F, 16, 8, 64, false, true);
  DeviceBuffer a32(16 * 64 * 4), b32(8 * 64 * 4), c32(16 * 8 * 4);
  EXPECT_EQ(cublasLtMatmul(handle, fp32.op, &alpha, a32.get(), fp32.a,
                           b32.get(), fp32.b, &beta, c32.get(), fp32.c,
                           c32.get(), fp32.d, &results[1].algo,
                           workspace.get(), 1024, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("algo was chosen for other types"));
  cublasLtMatmulAlgo_t forged{};
  EXPECT_EQ(cublasLtMatmul(handle, bf16.op, &alpha, a.get(), bf16.a, b.get(),
                           bf16.b, &beta, c.get(), bf16.c, c.get(), bf16.d,
                           &forged, workspace.get(), 1024, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
}

// What the emulation does not implement is refused by name, never ignored.
TEST_F(CublasLtTest, MatmulRefusesUnimplementedAttributes) {
  DeviceBuffer a(16 * 64 * 2), b(8 * 64 * 2), c(16 * 8 * 4);
  float alpha = 1, beta = 0;
  auto matmul = [&](Descriptors &d) {
    return cublasLtMatmul(handle, d.op, &alpha, a.get(), d.a, b.get(), d.b,
                          &beta, c.get(), d.c, c.get(), d.d, nullptr, nullptr,
                          0, nullptr);
  };
  Descriptors relu(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  relu.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_RELU});
  EXPECT_EQ(matmul(relu), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(),
              HasSubstr("CUBLASLT_MATMUL_DESC_EPILOGUE = 2 is not implemented"));
  EXPECT_EQ(heuristic(relu), CUBLAS_STATUS_NOT_SUPPORTED);
  Descriptors bias(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  bias.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void *>(c.get()));
  EXPECT_EQ(matmul(bias), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("CUBLASLT_MATMUL_DESC_BIAS_POINTER"));
  Descriptors fast(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  fast.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{1});
  EXPECT_EQ(matmul(fast), CUBLAS_STATUS_NOT_SUPPORTED);
  Descriptors rowMajor(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  int32_t order = CUBLASLT_ORDER_ROW;
  cublasLtMatrixLayoutSetAttribute(rowMajor.a, CUBLASLT_MATRIX_LAYOUT_ORDER,
                                   &order, sizeof(order));
  EXPECT_EQ(matmul(rowMajor), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("Adesc: CUBLASLT_MATRIX_LAYOUT_ORDER"));
  // Scales belong to FP8 matmuls.
  Descriptors scaled(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  scaled.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void *>(c.get()));
  EXPECT_EQ(matmul(scaled), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("takes no scales"));
}

TEST_F(CublasLtTest, MatmulRefusesInconsistentOperands) {
  DeviceBuffer a(16 * 64 * 2), b(8 * 64 * 2), c(16 * 8 * 4), scales(64);
  float alpha = 1, beta = 1;
  Descriptors bf16(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  // In place with a different D layout.
  cublasLtMatrixLayoutDestroy(bf16.d);
  cublasLtMatrixLayoutCreate(&bf16.d, CUDA_R_32F, 16, 8, 20);
  EXPECT_EQ(cublasLtMatmul(handle, bf16.op, &alpha, a.get(), bf16.a, b.get(),
                           bf16.b, &beta, c.get(), bf16.c, c.get(), bf16.d,
                           nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("C == D (in place)"));
  // Host pointer mode takes host scalars.
  EXPECT_EQ(cublasLtMatmul(handle, bf16.op,
                           static_cast<const float *>(scales.get()), a.get(),
                           bf16.a, b.get(), bf16.b, &beta, c.get(), bf16.c,
                           c.get(), bf16.c, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("alpha is device memory"));
  // D written over an input it reads (operands sized for fp32, so that B
  // cannot reach into A's allocation wherever the two were placed).
  Descriptors fp32(CUDA_R_32F, CUDA_R_32F, 16, 8, 64, false, true);
  DeviceBuffer a32(16 * 64 * 4), b32(8 * 64 * 4), c32(16 * 8 * 4);
  EXPECT_EQ(cublasLtMatmul(handle, fp32.op, &alpha, a32.get(), fp32.a,
                           b32.get(), fp32.b, &beta, c32.get(), fp32.c,
                           a32.get(), fp32.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("D overlaps A"));
  // Block scales need their pointers.
  // (Operands sized for this 16 x 16 x 128 problem, so that the refusal
  // cannot be an overlap of the earlier, smaller buffers instead.)
  DeviceBuffer a8(16 * 128), b8(16 * 128), c8(16 * 16 * 4);
  Descriptors blocks = fp8Forward(16, 16, 128);
  blocks.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
             int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F});
  blocks.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
             int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F});
  blocks.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
             static_cast<const void *>(scales.get()));
  EXPECT_EQ(cublasLtMatmul(handle, blocks.op, &alpha, a8.get(), blocks.a,
                           b8.get(), blocks.b, &beta, c8.get(), blocks.c,
                           c8.get(), blocks.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("need CUBLASLT_MATMUL_DESC_A_SCALE_POINTER"));
  // D's scale is for an FP8 D.
  Descriptors dScale = fp8Forward(16, 16, 32);
  dScale.set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
             static_cast<const void *>(scales.get()));
  EXPECT_EQ(heuristic(dScale), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_THAT(lastCublasLtError(), HasSubstr("it scales fp8 outputs"));
}

/// A matmul whose B lies partly outside its allocation, run to the end:
/// 0 when it is accepted at the call and faults on the stream.
int matmulPastAnAllocation() {
  if (!selectDevice("h100").ok())
    return 2;
  cublasLtHandle_t handle;
  cublasLtCreate(&handle);
  Descriptors bf16(CUDA_R_16BF, CUDA_R_32F, 16, 8, 64, false, true);
  // B's 8 x 64 BF16 need 1024 bytes.
  DeviceBuffer a(16 * 64 * 2), b(512), c(16 * 8 * 4);
  float alpha = 1, beta = 0;
  cublasStatus_t status = cublasLtMatmul(
      handle, bf16.op, &alpha, a.get(), bf16.a, b.get(), bf16.b, &beta,
      c.get(), bf16.c, c.get(), bf16.d, nullptr, nullptr, 0, nullptr);
  cudaError_t error = cudaDeviceSynchronize();
  return status == CUBLAS_STATUS_SUCCESS && error == cudaErrorIllegalAddress
             ? 0
             : 1;
}

// A range outside device memory faults on the stream, as a kernel's access
// would: the error is sticky, so the test runs in a child process.
TEST(CublasLtDeathTest, OperandsOutsideDeviceMemoryFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(matmulPastAnAllocation()), ::testing::ExitedWithCode(0),
              "virtual gpu: cublasLtMatmul: .*B");
}

} // namespace
} // namespace moe::rt::virtual_gpu::testing
