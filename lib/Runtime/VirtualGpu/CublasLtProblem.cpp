//===- CublasLtProblem.cpp - what a cuBLASLt matmul asks, checked ---------===//
//
// Turns a matmul descriptor and four layouts into a Problem, refusing what
// cuBLASLt documents as invalid (CUBLAS_STATUS_INVALID_VALUE: shapes that
// disagree, attributes set for a type combination that has no use for
// them) or unsupported (CUBLAS_STATUS_NOT_SUPPORTED), and everything the
// emulation does not implement (NOT_SUPPORTED, naming the attribute and its
// value): it never runs a matmul other than the one asked for.
//
// Implemented, with CUBLAS_COMPUTE_32F and CUDA_R_32F scales (cuBLASLt's
// table of supported types for that compute type, cublasLtMatmul):
//   A/B        C = D
//   BF16       BF16 or FP32
//   FP16       FP16 or FP32
//   FP32       FP32
//   FP8 (E4M3/E5M2, not both E5M2; sm_89 and later), by C:
//              FP32 -> D FP32; BF16 -> D BF16 or E4M3; FP16 -> D FP16 or
//              E4M3; D may be E5M2 where an input is E5M2.
// FP8 also needs the "TN" layout (A transposed, B not) and the tensor-core
// requirements of 16 bytes: k, the leading dimensions of all four matrices
// and C's rows in bytes multiples of 16 (the pointers too, checked against
// the algorithm: CublasLtMatmul.cpp). Its scale pointers (A, B and, for an
// FP8 D, D) and AMAX_D are taken; the scale modes SCALAR_32F, and on
// Hopper (sm_90) VEC128_32F and BLK128x128_32F for A and B, not both
// BLK128x128_32F, unbatched.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/CublasLt.h"

#include "absl/strings/str_cat.h"

#include <cstring>

namespace moe::rt::virtual_gpu::cublaslt {
namespace {

bool isFp8(cudaDataType_t type) {
  return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2;
}

/// Bytes per element of the types implemented; 0 for any other.
size_t bytesOf(uint32_t type) {
  switch (type) {
  case CUDA_R_32F:
    return 4;
  case CUDA_R_16BF:
  case CUDA_R_16F:
    return 2;
  case CUDA_R_8F_E4M3:
  case CUDA_R_8F_E5M2:
    return 1;
  default:
    return 0;
  }
}

const char *typeName(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_32F:
    return "CUDA_R_32F";
  case CUDA_R_16BF:
    return "CUDA_R_16BF";
  case CUDA_R_16F:
    return "CUDA_R_16F";
  case CUDA_R_8F_E4M3:
    return "CUDA_R_8F_E4M3";
  case CUDA_R_8F_E5M2:
    return "CUDA_R_8F_E5M2";
  default:
    return "an unimplemented type";
  }
}

/// Whether cuBLASLt runs A x B -> C, D with fp32 compute and scales.
bool supportedTypes(const Problem &p) {
  cudaDataType_t a = p.a.type, b = p.b.type, c = p.c.type, d = p.d.type;
  if (!isFp8(a) && !isFp8(b)) {
    if (a != b || c != d)
      return false;
    return c == CUDA_R_32F || (c == a && a != CUDA_R_32F);
  }
  if (!isFp8(a) || !isFp8(b) || (a == CUDA_R_8F_E5M2 && b == CUDA_R_8F_E5M2))
    return false;
  bool e5m2Input = a == CUDA_R_8F_E5M2 || b == CUDA_R_8F_E5M2;
  bool fp8Output = d == CUDA_R_8F_E4M3 || (e5m2Input && d == CUDA_R_8F_E5M2);
  switch (c) {
  case CUDA_R_32F:
    return d == CUDA_R_32F;
  case CUDA_R_16BF:
  case CUDA_R_16F:
    return d == c || fp8Output;
  default:
    return false;
  }
}

/// The attributes of a matmul descriptor whose values the emulation runs
/// (each checked below); any other set to something other than its default
/// is refused.
constexpr int kImplementedAttributes[] = {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE,    CUBLASLT_MATMUL_DESC_SCALE_TYPE,
    CUBLASLT_MATMUL_DESC_POINTER_MODE,    CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,          CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,  CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
    CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
    // A hint to the heuristic about concurrent work; results do not
    // depend on it.
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET};

bool implemented(int id) {
  for (int known : kImplementedAttributes)
    if (known == id)
      return true;
  return false;
}

/// FNV-1a over what decides which algorithms apply.
uint64_t fingerprintOf(const Problem &p) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  for (const Matrix *matrix : {&p.a, &p.b, &p.c, &p.d})
    mix(matrix->type);
  mix(p.transA);
  mix(p.transB);
  mix(static_cast<uint64_t>(p.aScaleMode));
  mix(static_cast<uint64_t>(p.bScaleMode));
  mix(p.devicePointers);
  return hash;
}

} // namespace

uint64_t Matrix::spanBytes() const {
  uint64_t last = (rows - 1) + (cols - 1) * static_cast<uint64_t>(ld) +
                  static_cast<uint64_t>(batch - 1) * static_cast<uint64_t>(stride);
  return (last + 1) * elementBytes;
}

uint64_t scaleCount(ScaleMode mode, uint64_t outer, uint64_t k) {
  uint64_t kBlocks = (k + 127) / 128;
  switch (mode) {
  case ScaleMode::Vec128:
    return kBlocks * outer;
  case ScaleMode::Block128x128:
    return (outer + 127) / 128 * ((kBlocks + 3) / 4 * 4);
  case ScaleMode::Scalar:
    break;
  }
  return 1;
}

uint64_t scaleIndex(ScaleMode mode, uint64_t outer, uint64_t k, uint64_t row,
                    uint64_t kBlock) {
  uint64_t kBlocks = (k + 127) / 128;
  switch (mode) {
  case ScaleMode::Vec128:
    return kBlock * outer + row;
  case ScaleMode::Block128x128:
    return row / 128 * ((kBlocks + 3) / 4 * 4) + kBlock;
  case ScaleMode::Scalar:
    break;
  }
  return 0;
}

uint32_t matrixAlignment(const Matrix &matrix, uint32_t allowed) {
  uint64_t bits = reinterpret_cast<uintptr_t>(matrix.data) |
                  static_cast<uint64_t>(matrix.ld) * matrix.elementBytes | 16;
  if (matrix.batch > 1)
    bits |= static_cast<uint64_t>(matrix.stride) * matrix.elementBytes;
  uint32_t shared = static_cast<uint32_t>(bits & (~bits + 1));
  return shared < allowed ? shared : allowed;
}

cublasStatus_t resolveProblem(const char *function, const DeviceModel &device,
                              MatmulDesc &desc, cublasLtMatrixLayout_t aDesc,
                              cublasLtMatrixLayout_t bDesc,
                              cublasLtMatrixLayout_t cDesc,
                              cublasLtMatrixLayout_t dDesc, Problem &p) {
  auto invalid = [&](const std::string &why) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function, why);
  };
  auto unsupported = [&](const std::string &why) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, function, why);
  };
  const Attributes &op = desc.attributes;
  for (const Attributes::Known &attribute : op)
    if (op.changed(attribute.id) && !implemented(attribute.id))
      return unsupported(absl::StrCat(attribute.name, " = ",
                                      op.value(attribute.id),
                                      " is not implemented by the virtual gpu"));
  if (op.value(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE) != CUBLAS_COMPUTE_32F ||
      op.value(CUBLASLT_MATMUL_DESC_SCALE_TYPE) != CUDA_R_32F)
    return unsupported(absl::StrCat(
        "compute type ", op.value(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE),
        " with scale type ", op.value(CUBLASLT_MATMUL_DESC_SCALE_TYPE),
        " is not implemented (only CUBLAS_COMPUTE_32F with CUDA_R_32F)"));
  int64_t pointerMode = op.value(CUBLASLT_MATMUL_DESC_POINTER_MODE);
  if (pointerMode != CUBLASLT_POINTER_MODE_HOST &&
      pointerMode != CUBLASLT_POINTER_MODE_DEVICE)
    return unsupported(absl::StrCat("CUBLASLT_MATMUL_DESC_POINTER_MODE = ",
                                    pointerMode,
                                    " is not implemented (host or device)"));
  p.devicePointers = pointerMode == CUBLASLT_POINTER_MODE_DEVICE;
  for (int id : {CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB})
    if (op.value(id) != CUBLAS_OP_N && op.value(id) != CUBLAS_OP_T)
      return unsupported(absl::StrCat(op.find(id)->name, " = ", op.value(id),
                                      " is not implemented (N or T)"));
  p.transA = op.value(CUBLASLT_MATMUL_DESC_TRANSA) == CUBLAS_OP_T;
  p.transB = op.value(CUBLASLT_MATMUL_DESC_TRANSB) == CUBLAS_OP_T;

  // The four layouts.
  struct Named {
    cublasLtMatrixLayout_t handle;
    Matrix *matrix;
    const char *name;
  };
  for (Named named : {Named{aDesc, &p.a, "A"}, Named{bDesc, &p.b, "B"},
                      Named{cDesc, &p.c, "C"}, Named{dDesc, &p.d, "D"}}) {
    Layout *layout = findLayout(named.handle);
    if (!layout)
      return invalid(absl::StrCat(named.name,
                                  "desc is not a live matrix layout"));
    const Attributes &l = layout->attributes;
    for (int id : {CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET,
                   CUBLASLT_MATRIX_LAYOUT_BATCH_MODE})
      if (l.changed(id))
        return unsupported(absl::StrCat(named.name, "desc: ", l.find(id)->name,
                                        " = ", l.value(id),
                                        " is not implemented by the virtual gpu"));
    Matrix &m = *named.matrix;
    m.type = static_cast<cudaDataType_t>(l.value(CUBLASLT_MATRIX_LAYOUT_TYPE));
    m.elementBytes = bytesOf(m.type);
    if (m.elementBytes == 0)
      return unsupported(absl::StrCat(named.name, "desc: data type ", m.type,
                                      " is not implemented"));
    m.rows = static_cast<uint64_t>(l.value(CUBLASLT_MATRIX_LAYOUT_ROWS));
    m.cols = static_cast<uint64_t>(l.value(CUBLASLT_MATRIX_LAYOUT_COLS));
    m.ld = l.value(CUBLASLT_MATRIX_LAYOUT_LD);
    m.batch = static_cast<int32_t>(l.value(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT));
    m.stride = l.value(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
    if (m.rows == 0 || m.cols == 0)
      return unsupported(absl::StrCat(named.name, " is empty (", m.rows, " x ",
                                      m.cols, "): not implemented"));
    if (m.rows > INT32_MAX || m.cols > INT32_MAX)
      return unsupported(absl::StrCat(named.name, " is ", m.rows, " x ", m.cols,
                                      ": sizes beyond int32_t"));
    if (m.ld < static_cast<int64_t>(m.rows))
      return invalid(absl::StrCat(named.name, "desc: leading dimension ", m.ld,
                                  " is less than its ", m.rows, " rows"));
    if (m.batch < 1 || m.stride < 0)
      return invalid(absl::StrCat(named.name, "desc: batch count ", m.batch,
                                  " and stride ", m.stride,
                                  " must be positive and non-negative"));
  }
  p.m = p.transA ? p.a.cols : p.a.rows;
  p.k = p.transA ? p.a.rows : p.a.cols;
  p.n = p.transB ? p.b.rows : p.b.cols;
  uint64_t kOfB = p.transB ? p.b.cols : p.b.rows;
  p.batch = p.d.batch;
  if (kOfB != p.k)
    return invalid(absl::StrCat("op(A) is ", p.m, " x ", p.k, " but op(B) is ",
                                kOfB, " x ", p.n));
  for (const Matrix *m : {&p.c, &p.d})
    if (m->rows != p.m || m->cols != p.n)
      return invalid(absl::StrCat(m == &p.c ? "C" : "D", " is ", m->rows, " x ",
                                  m->cols, ", not op(A) op(B)'s ", p.m, " x ",
                                  p.n));
  if (p.a.batch != p.batch || p.b.batch != p.batch || p.c.batch != p.batch)
    return invalid(absl::StrCat("batch counts differ: A ", p.a.batch, ", B ",
                                p.b.batch, ", C ", p.c.batch, ", D ", p.batch));
  // Each batch writes its own D.
  if (p.batch > 1 &&
      static_cast<uint64_t>(p.d.stride) < static_cast<uint64_t>(p.d.ld) * p.n)
    return invalid(absl::StrCat("D's batch stride ", p.d.stride,
                                " overlaps its matrices of ld ", p.d.ld, " x ",
                                p.n, " columns"));
  if (!supportedTypes(p))
    return unsupported(absl::StrCat(
        "no matmul of A ", typeName(p.a.type), ", B ", typeName(p.b.type),
        ", C ", typeName(p.c.type), ", D ", typeName(p.d.type),
        " with CUBLAS_COMPUTE_32F"));
  p.fp8 = isFp8(p.a.type);

  p.aScale = static_cast<const float *>(
      op.pointer(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER));
  p.bScale = static_cast<const float *>(
      op.pointer(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER));
  p.dScale = static_cast<const float *>(
      op.pointer(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER));
  p.amaxD = static_cast<float *>(
      const_cast<void *>(op.pointer(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER)));
  for (int id : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
    int64_t mode = op.value(id);
    if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
        mode != CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F &&
        mode != CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
      return unsupported(absl::StrCat(op.find(id)->name, " = ", mode,
                                      " is not implemented (SCALAR_32F, "
                                      "VEC128_32F, BLK128x128_32F)"));
    ScaleMode scale = mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                          ? ScaleMode::Vec128
                      : mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                          ? ScaleMode::Block128x128
                          : ScaleMode::Scalar;
    (id == CUBLASLT_MATMUL_DESC_A_SCALE_MODE ? p.aScaleMode : p.bScaleMode) = scale;
  }
  p.fingerprint = fingerprintOf(p);

  if (!p.fp8) {
    for (int id : {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                   CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                   CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
                   CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,
                   CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                   CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
      if (op.changed(id))
        return invalid(absl::StrCat(op.find(id)->name, " is set for a matmul of ",
                                    typeName(p.a.type),
                                    " inputs, which takes no scales"));
    return CUBLAS_STATUS_SUCCESS;
  }

  // FP8.
  int capability = device.major * 10 + device.minor;
  if (capability < 89)
    return refuse(CUBLAS_STATUS_ARCH_MISMATCH, function,
                  absl::StrCat("fp8 matmuls need sm_89 or later; ", device.name,
                               " is sm_", capability));
  if (!p.transA || p.transB)
    return unsupported("fp8 matmuls take A transposed and B not (the TN "
                       "format)");
  if (p.k % 16 != 0)
    return unsupported(absl::StrCat("fp8 matmuls need k to be a multiple of "
                                    "16, found ", p.k));
  if (p.m * p.c.elementBytes % 16 != 0)
    return unsupported(absl::StrCat("fp8 matmuls need C's ", p.m,
                                    " rows to span a multiple of 16 bytes"));
  for (const Matrix *m : {&p.a, &p.b, &p.c, &p.d})
    if (static_cast<uint64_t>(m->ld) * m->elementBytes % 16 != 0)
      return unsupported(absl::StrCat(
          "fp8 matmuls need leading dimensions of a multiple of 16 bytes; ",
          m == &p.a ? "A" : m == &p.b ? "B" : m == &p.c ? "C" : "D", "'s is ",
          m->ld, " x ", m->elementBytes, " bytes"));
  if (p.dScale && !isFp8(p.d.type))
    return invalid(absl::StrCat("CUBLASLT_MATMUL_DESC_D_SCALE_POINTER is set "
                                "for a D of ",
                                typeName(p.d.type), ": it scales fp8 outputs"));
  bool aBlocks = p.aScaleMode != ScaleMode::Scalar;
  bool bBlocks = p.bScaleMode != ScaleMode::Scalar;
  if (!aBlocks && !bBlocks)
    return CUBLAS_STATUS_SUCCESS;
  if (aBlocks != bBlocks)
    return unsupported("block scale modes apply to both A and B or neither");
  if (p.aScaleMode == ScaleMode::Block128x128 &&
      p.bScaleMode == ScaleMode::Block128x128)
    return unsupported("A and B cannot both take 128 x 128 block scales");
  if (device.major != 9)
    return refuse(CUBLAS_STATUS_ARCH_MISMATCH, function,
                  absl::StrCat("128-element block scaling is Hopper's (sm_90); ",
                               device.name, " is sm_", capability));
  if (p.batch != 1)
    return unsupported("block-scaled matmuls are not batched");
  // Each group of 1 x 128 scales starts 16-byte aligned.
  if ((p.aScaleMode == ScaleMode::Vec128 && p.m % 4 != 0) ||
      (p.bScaleMode == ScaleMode::Vec128 && p.n % 4 != 0))
    return unsupported(absl::StrCat("VEC128_32F scales need the scaled "
                                    "operand's outer size to be a multiple of "
                                    "4; m ",
                                    p.m, ", n ", p.n));
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace moe::rt::virtual_gpu::cublaslt
