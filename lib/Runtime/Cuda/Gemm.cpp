//===- Gemm.cpp - GEMMs through cuBLASLt ----------------------------------===//
#include "moe/Runtime/Cuda/Gemm.h"

#include "CudaStatus.h"

#include "moe/Runtime/Cuda/Device.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {
namespace {

bool isFp8(GemmInput input) { return input != GemmInput::BF16; }

cudaDataType_t dataType(GemmInput input) {
  switch (input) {
  case GemmInput::BF16:
    return CUDA_R_16BF;
  case GemmInput::E4M3:
    return CUDA_R_8F_E4M3;
  case GemmInput::E5M2:
    return CUDA_R_8F_E5M2;
  }
  return CUDA_R_16BF;
}

absl::StatusOr<cublasLtMatrixLayout_t> makeLayout(cudaDataType_t type,
                                                  const ColumnMajor &shape,
                                                  int32_t batch,
                                                  int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  MOE_CUBLAS_OK(cublasLtMatrixLayoutCreate(&layout, type, shape.rows,
                                           shape.cols, shape.ld));
  if (batch > 1) {
    absl::Status count = cublasStatus(
        cublasLtMatrixLayoutSetAttribute(layout,
                                         CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                         &batch, sizeof(batch)),
        "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    absl::Status offset =
        count.ok() ? cublasStatus(cublasLtMatrixLayoutSetAttribute(
                                      layout,
                                      CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                      &stride, sizeof(stride)),
                                  "cublasLtMatrixLayoutSetAttribute("
                                  "STRIDED_BATCH_OFFSET)")
                   : count;
    if (!offset.ok()) {
      cublasLtMatrixLayoutDestroy(layout);
      return offset;
    }
  }
  return layout;
}

/// cuBLASLt's scale mode of an input.
int32_t scaleMode(GemmScaling scaling) {
  switch (scaling) {
  case GemmScaling::Tensor:
    return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  case GemmScaling::Rows128:
    return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  case GemmScaling::Squares128:
    return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

std::string shapeText(const GemmSpec &spec) {
  return absl::StrCat(spec.transA ? "A^T" : "A", " x ", spec.transB ? "B^T" : "B",
                      " [", spec.m, " x ", spec.k, "] x [", spec.k, " x ",
                      spec.n, "]", spec.batch > 1 ? absl::StrCat(" (batch ", spec.batch, ")") : "",
                      ", ", gemmInputName(spec.a), " x ", gemmInputName(spec.b));
}

} // namespace

const char *gemmInputName(GemmInput input) {
  switch (input) {
  case GemmInput::BF16:
    return "bf16";
  case GemmInput::E4M3:
    return "e4m3";
  case GemmInput::E5M2:
    return "e5m2";
  }
  return "unknown";
}

GemmInput effectiveInput(GemmInput requested, int computeCapability) {
  return isFp8(requested) && !hasFp8TensorCores(computeCapability)
             ? GemmInput::BF16
             : requested;
}

absl::Status validateGemm(const GemmSpec &spec) {
  auto invalid = [&](const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM ", shapeText(spec), ": ", why));
  };
  if (spec.m <= 0 || spec.n <= 0 || spec.k <= 0)
    return invalid("sizes must be positive");
  if (spec.batch < 1)
    return invalid(absl::StrCat("batch must be >= 1, found ", spec.batch));
  if (spec.strideA < 0 || spec.strideB < 0 || spec.strideC < 0)
    return invalid("batch strides must be >= 0");
  // Row-major: the stored rows are this long.
  int64_t rowA = spec.transA ? spec.m : spec.k;
  int64_t rowB = spec.transB ? spec.k : spec.n;
  if (spec.lda < rowA || spec.ldb < rowB || spec.ldc < spec.n)
    return invalid(absl::StrCat("leading dimensions ", spec.lda, ", ", spec.ldb,
                                ", ", spec.ldc, " must be at least the rows ",
                                rowA, ", ", rowB, ", ", spec.n));
  if (!isFp8(spec.a) && !isFp8(spec.b))
    return absl::OkStatus();
  if (!isFp8(spec.a) || !isFp8(spec.b))
    return invalid("fp8 GEMMs read both inputs in fp8");
  if (spec.a == GemmInput::E5M2 && spec.b == GemmInput::E5M2)
    return invalid("cuBLASLt has no e5m2 x e5m2 GEMM: one input must be e4m3");
  if (spec.transA || !spec.transB)
    return invalid("fp8 GEMMs take op(A) = A and op(B) = B^T (x W^T with W "
                   "stored [out, in]): transpose the fp8 operand first");
  if (spec.k % 16 != 0 || spec.lda % 16 != 0 || spec.ldb % 16 != 0)
    return invalid("fp8 GEMMs need k and the leading dimensions of A and B "
                   "to be multiples of 16");
  bool aBlocks = spec.aScaling != GemmScaling::Tensor;
  bool bBlocks = spec.bScaling != GemmScaling::Tensor;
  if (aBlocks != bBlocks)
    return invalid("block scaling applies to both inputs or neither");
  if (!aBlocks)
    return absl::OkStatus();
  if (spec.a != GemmInput::E4M3 || spec.b != GemmInput::E4M3)
    return invalid("block-scaled fp8 GEMMs read e4m3 inputs");
  if (spec.aScaling != GemmScaling::Rows128)
    return invalid("block scaling takes A (the activation) by rows");
  if (spec.batch != 1)
    return invalid("block-scaled fp8 GEMMs are not batched");
  if (spec.m % 4 != 0 || spec.n % 4 != 0)
    return invalid("block-scaled fp8 GEMMs need m and n to be multiples of 4");
  return absl::OkStatus();
}

GemmLayouts gemmLayouts(const GemmSpec &spec) {
  GemmLayouts layouts;
  // B stored row-major [k, n] is column-major [n, k], which is op(B)^T.
  layouts.first = spec.transB ? ColumnMajor{spec.k, spec.n, spec.ldb}
                              : ColumnMajor{spec.n, spec.k, spec.ldb};
  layouts.transFirst = spec.transB;
  layouts.second = spec.transA ? ColumnMajor{spec.m, spec.k, spec.lda}
                               : ColumnMajor{spec.k, spec.m, spec.lda};
  layouts.transSecond = spec.transA;
  layouts.c = ColumnMajor{spec.n, spec.m, spec.ldc};
  return layouts;
}

absl::StatusOr<std::unique_ptr<GemmDescriptors>>
GemmDescriptors::create(const GemmSpec &requested, int computeCapability) {
  GemmSpec spec = requested;
  spec.a = effectiveInput(spec.a, computeCapability);
  spec.b = effectiveInput(spec.b, computeCapability);
  if (absl::Status status = validateGemm(spec); !status.ok())
    return status;
  std::unique_ptr<GemmDescriptors> descriptors(new GemmDescriptors());
  descriptors->spec_ = spec;
  descriptors->fp8_ = isFp8(spec.a);
  MOE_CUBLAS_OK(cublasLtMatmulDescCreate(&descriptors->operation_,
                                         CUBLAS_COMPUTE_32F, CUDA_R_32F));
  GemmLayouts layouts = gemmLayouts(spec);
  cublasOperation_t first = layouts.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t second = layouts.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
  MOE_CUBLAS_OK(cublasLtMatmulDescSetAttribute(
      descriptors->operation_, CUBLASLT_MATMUL_DESC_TRANSA, &first,
      sizeof(first)));
  MOE_CUBLAS_OK(cublasLtMatmulDescSetAttribute(
      descriptors->operation_, CUBLASLT_MATMUL_DESC_TRANSB, &second,
      sizeof(second)));
  if (descriptors->fp8_) {
    // Accumulate in full fp32: FP8 tensor cores' fast accumulation keeps
    // too few bits over long k (DeepSeek-V3, 3.3.2).
    int8_t fastAccumulation = 0;
    MOE_CUBLAS_OK(cublasLtMatmulDescSetAttribute(
        descriptors->operation_, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
        &fastAccumulation, sizeof(fastAccumulation)));
    // cuBLASLt's A is our B and its B our A.
    for (auto [attribute, scaling] :
         {std::make_pair(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, spec.bScaling),
          std::make_pair(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, spec.aScaling)}) {
      int32_t mode = scaleMode(scaling);
      MOE_CUBLAS_OK(cublasLtMatmulDescSetAttribute(
          descriptors->operation_, attribute, &mode, sizeof(mode)));
    }
  }
  absl::StatusOr<cublasLtMatrixLayout_t> layout =
      makeLayout(dataType(spec.b), layouts.first, spec.batch, spec.strideB);
  if (!layout.ok())
    return layout.status();
  descriptors->first_ = *layout;
  layout = makeLayout(dataType(spec.a), layouts.second, spec.batch, spec.strideA);
  if (!layout.ok())
    return layout.status();
  descriptors->second_ = *layout;
  layout = makeLayout(spec.c == GemmOutput::BF16 ? CUDA_R_16BF : CUDA_R_32F,
                      layouts.c, spec.batch, spec.strideC);
  if (!layout.ok())
    return layout.status();
  descriptors->c_ = *layout;
  return descriptors;
}

GemmDescriptors::~GemmDescriptors() {
  if (c_)
    cublasLtMatrixLayoutDestroy(c_);
  if (second_)
    cublasLtMatrixLayoutDestroy(second_);
  if (first_)
    cublasLtMatrixLayoutDestroy(first_);
  if (operation_)
    cublasLtMatmulDescDestroy(operation_);
}

absl::Status GemmDescriptors::setScales(const float *aScale,
                                        const float *bScale) {
  if (!fp8_)
    return absl::FailedPreconditionError(
        "GEMM scales: a bf16 GEMM has no dequantization scales");
  if (!aScale || !bScale)
    return absl::InvalidArgumentError(
        "GEMM scales: an fp8 GEMM needs the scales of both inputs");
  // cuBLASLt's A is our B and its B our A.
  MOE_CUBLAS_OK(cublasLtMatmulDescSetAttribute(
      operation_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &bScale,
      sizeof(bScale)));
  MOE_CUBLAS_OK(cublasLtMatmulDescSetAttribute(
      operation_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &aScale,
      sizeof(aScale)));
  return absl::OkStatus();
}

/// Plans kept before the cache starts over.
constexpr size_t kMaxPlans = 4096;

struct GemmRunner::Plan {
  std::unique_ptr<GemmDescriptors> descriptors;
  cublasLtMatmulAlgo_t algorithm;
};

absl::StatusOr<std::unique_ptr<GemmRunner>>
GemmRunner::create(int computeCapability, uint64_t workspaceBytes) {
  std::unique_ptr<GemmRunner> runner(new GemmRunner());
  runner->computeCapability = computeCapability;
  MOE_CUBLAS_OK(cublasLtCreate(&runner->handle));
  runner->workspaceBytes = workspaceBytes;
  MOE_CUDA_OK(cudaMalloc(&runner->workspace, workspaceBytes));
  return runner;
}

GemmRunner::~GemmRunner() {
  plans.clear();
  if (workspace)
    cudaFree(workspace);
  if (handle)
    cublasLtDestroy(handle);
}

absl::StatusOr<GemmRunner::Plan *> GemmRunner::plan(const GemmSpec &spec,
                                                    uint32_t alignment) {
  auto found = plans.find({spec, alignment});
  if (found != plans.end())
    return found->second.get();
  // Expert GEMMs take a new row count almost every step; a bounded cache
  // keeps a long run from growing without end (replanning is cheap).
  if (plans.size() >= kMaxPlans)
    plans.clear();
  absl::StatusOr<std::unique_ptr<GemmDescriptors>> descriptors =
      GemmDescriptors::create(spec, computeCapability);
  if (!descriptors.ok())
    return descriptors.status();
  cublasLtMatmulPreference_t preference = nullptr;
  MOE_CUBLAS_OK(cublasLtMatmulPreferenceCreate(&preference));
  cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes));
  for (cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (set == CUBLAS_STATUS_SUCCESS)
      set = cublasLtMatmulPreferenceSetAttribute(preference, attribute,
                                                 &alignment, sizeof(alignment));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t heuristic =
      set == CUBLAS_STATUS_SUCCESS
          ? cublasLtMatmulAlgoGetHeuristic(
                handle, (*descriptors)->operation(), (*descriptors)->first(),
                (*descriptors)->second(), (*descriptors)->c(),
                (*descriptors)->c(), preference, 1, &result, &returned)
          : set;
  cublasLtMatmulPreferenceDestroy(preference);
  MOE_CUBLAS_OK(heuristic);
  if (returned == 0)
    return absl::UnimplementedError(absl::StrCat(
        "GEMM ", shapeText((*descriptors)->spec()),
        ": cuBLASLt has no algorithm for it on sm_", computeCapability));
  auto plan = std::make_unique<Plan>();
  plan->descriptors = std::move(*descriptors);
  plan->algorithm = result.algo;
  Plan *raw = plan.get();
  plans.emplace(std::make_pair(spec, alignment), std::move(plan));
  return raw;
}

absl::Status GemmRunner::run(const GemmSpec &spec, float alpha, const void *a,
                             const void *b, float beta, void *c,
                             cudaStream_t stream, const float *aScale,
                             const float *bScale) {
  // The largest power of two (up to 16) that every operand address is a
  // multiple of: sub-blocks of stacked activations need not be 16-aligned.
  uintptr_t addresses = reinterpret_cast<uintptr_t>(a) |
                        reinterpret_cast<uintptr_t>(b) |
                        reinterpret_cast<uintptr_t>(c) | 16;
  uint32_t alignment = static_cast<uint32_t>(addresses & (~addresses + 1));
  absl::StatusOr<Plan *> planned = plan(spec, alignment);
  if (!planned.ok())
    return planned.status();
  const GemmDescriptors &d = *(*planned)->descriptors;
  if (d.fp8())
    if (absl::Status status = (*planned)->descriptors->setScales(aScale, bScale);
        !status.ok())
      return status;
  MOE_CUBLAS_OK(cublasLtMatmul(handle, d.operation(), &alpha, b, d.first(), a,
                               d.second(), &beta, c, d.c(), c, d.c(),
                               &(*planned)->algorithm, workspace,
                               workspaceBytes, stream));
  return absl::OkStatus();
}

} // namespace moe::rt::cuda
