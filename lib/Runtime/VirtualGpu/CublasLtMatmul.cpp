//===- CublasLtMatmul.cpp - cublasLtMatmul and its heuristic --------------===//
//
// cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul of the virtual GPU.
//
// The heuristic is strict: it returns no algorithm (and
// CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt does when none applies) for a
// problem that cuBLASLt cannot run (CublasLtProblem.cpp) or that the
// preference rules out: alignments below what the types need (the
// element's size; 16 bytes for FP8), an implementation or reduction mask
// that excludes every algorithm. Of the two algorithms (CublasLt.h) it
// returns those that fit the preference's workspace, the one that uses the
// workspace first.
//
// An algorithm records what it was chosen for: the types, transposes and
// scale modes, the workspace it needs and the alignment of each matrix it
// may assume (the most the preference allowed, up to 16 bytes, within what
// the leading dimensions and batch strides keep). cublasLtMatmul refuses
// (CUBLAS_STATUS_INVALID_VALUE) an algorithm used for another kind of
// problem, a workspace smaller than it needs, and pointers less aligned
// than it assumed; then validates the rest on the host and enqueues the
// computation on the stream (CublasLtCompute.cpp).
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/CublasLt.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <tuple>

namespace moe::rt::virtual_gpu::cublaslt {
namespace {

/// Marks an algorithm as the emulation's (cublasLtMatmulAlgo_t::data[0],
/// with the algorithm in its low byte).
constexpr uint64_t kAlgorithmMagic = 0x76677075'6c740000ull; // "vgpult"

/// What an algorithm records, in cublasLtMatmulAlgo_t's 8 words.
struct Chosen {
  Algorithm algorithm = Algorithm::Sequential;
  uint64_t fingerprint = 0;
  /// The alignment it assumes of A, B, C, D, in bytes.
  uint32_t alignment[4] = {};
};

cublasLtMatmulAlgo_t encodeAlgorithm(const Chosen &chosen) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = kAlgorithmMagic | static_cast<uint64_t>(chosen.algorithm);
  algo.data[1] = chosen.fingerprint;
  for (int i = 0; i < 4; ++i)
    algo.data[2] |= static_cast<uint64_t>(chosen.alignment[i]) << (16 * i);
  return algo;
}

bool decodeAlgorithm(const cublasLtMatmulAlgo_t &algo, Chosen &chosen) {
  uint64_t id = algo.data[0] & 0xff;
  if ((algo.data[0] & ~0xffull) != kAlgorithmMagic ||
      (id != static_cast<uint64_t>(Algorithm::Sequential) &&
       id != static_cast<uint64_t>(Algorithm::SplitK)))
    return false;
  chosen.algorithm = static_cast<Algorithm>(id);
  chosen.fingerprint = algo.data[1];
  for (int i = 0; i < 4; ++i)
    chosen.alignment[i] = static_cast<uint32_t>(algo.data[2] >> (16 * i)) & 0xffff;
  return true;
}

const char *const kMatrixNames[4] = {"A", "B", "C", "D"};

Matrix *matrices(Problem &p, int i) {
  Matrix *all[4] = {&p.a, &p.b, &p.c, &p.d};
  return all[i];
}

/// The least alignment each matrix of `p` needs: its element's; FP8 16
/// bytes (cuBLASLt's FP8 requirements).
uint32_t neededAlignment(const Problem &p, const Matrix &m) {
  return p.fp8 ? 16 : static_cast<uint32_t>(m.elementBytes);
}

uint64_t inputFlag(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_16BF:
    return CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF;
  case CUDA_R_16F:
    return CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16F;
  case CUDA_R_8F_E4M3:
    return CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_8F_E4M3;
  case CUDA_R_8F_E5M2:
    return CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_8F_E5M2;
  default:
    return CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_32F;
  }
}

/// cublasLtNumericalImplFlags_t of the algorithms: fp32 multiply-adds
/// (exact products of narrow inputs) into fp32.
uint64_t implementationFlags(const Problem &p) {
  return CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA |
         CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F | inputFlag(p.a.type) |
         inputFlag(p.b.type);
}

std::string shapeOf(const Problem &p) {
  return absl::StrCat(p.m, " x ", p.n, " x ", p.k,
                      p.batch > 1 ? absl::StrCat(" (batch ", p.batch, ")") : "");
}

} // namespace
} // namespace moe::rt::virtual_gpu::cublaslt

using namespace moe::rt::virtual_gpu;
using namespace moe::rt::virtual_gpu::cublaslt;

extern "C" {

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t aDesc, cublasLtMatrixLayout_t bDesc,
    cublasLtMatrixLayout_t cDesc, cublasLtMatrixLayout_t dDesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount) {
  const char *function = "cublasLtMatmulAlgoGetHeuristic";
  if (!returnAlgoCount || !heuristicResultsArray || requestedAlgoCount <= 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  absl::StrCat("requestedAlgoCount ", requestedAlgoCount,
                               " must be positive, with somewhere to put them"));
  *returnAlgoCount = 0;
  Context *context = findContext(handle);
  if (!context)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, function,
                  "the handle was never created or is already destroyed");
  MatmulDesc *desc = findMatmulDesc(operationDesc);
  Preference *pref = findPreference(preference);
  if (!desc || !pref)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  !desc ? "operationDesc is not a live matmul descriptor"
                        : "preference is not a live preference descriptor");
  const Attributes &prefs = pref->attributes;
  for (int id : {CUBLASLT_MATMUL_PREF_SEARCH_MODE,
                 CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT})
    if (prefs.changed(id))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, function,
                    absl::StrCat(prefs.find(id)->name, " = ", prefs.value(id),
                                 " is not implemented by the virtual gpu"));
  Problem p;
  cublasStatus_t status = resolveProblem(function, *context->device, *desc,
                                         aDesc, bDesc, cDesc, dDesc, p);
  // No algorithm for what cuBLASLt cannot run here.
  if (status != CUBLAS_STATUS_SUCCESS)
    return status == CUBLAS_STATUS_INVALID_VALUE ? status
                                                 : CUBLAS_STATUS_NOT_SUPPORTED;
  uint64_t implMask =
      static_cast<uint64_t>(prefs.value(CUBLASLT_MATMUL_PREF_IMPL_MASK));
  if ((implMask & implementationFlags(p)) != implementationFlags(p))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, function,
                  absl::StrCat("CUBLASLT_MATMUL_PREF_IMPL_MASK ", implMask,
                               " excludes the only implementation, ",
                               implementationFlags(p)));
  Chosen chosen;
  chosen.fingerprint = p.fingerprint;
  for (int i = 0; i < 4; ++i) {
    const Matrix &m = *matrices(p, i);
    uint32_t allowed = static_cast<uint32_t>(
        prefs.value(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i));
    chosen.alignment[i] = matrixAlignment(m, allowed);
    if (chosen.alignment[i] < neededAlignment(p, m))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, function,
                    absl::StrCat("no algorithm for ", kMatrixNames[i],
                                 " aligned to ", chosen.alignment[i],
                                 " bytes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_",
                                 kMatrixNames[i], "_BYTES ", allowed,
                                 ", leading dimension ", m.ld, "): ",
                                 p.fp8 ? "fp8 needs 16" : "needs its element's size"));
  }
  uint64_t maxWorkspace =
      static_cast<uint64_t>(prefs.value(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES));
  uint32_t reductions = static_cast<uint32_t>(
      prefs.value(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK));
  int count = 0;
  for (Algorithm algorithm : {Algorithm::SplitK, Algorithm::Sequential}) {
    if (count == requestedAlgoCount || !algorithmApplies(algorithm, p))
      continue;
    uint64_t workspace = algorithmWorkspace(algorithm, p);
    // SplitK reduces fp32 halves kept in the workspace.
    bool reductionAllowed = algorithm == Algorithm::Sequential ||
                            (reductions & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    if (workspace > maxWorkspace || !reductionAllowed)
      continue;
    chosen.algorithm = algorithm;
    cublasLtMatmulHeuristicResult_t &result = heuristicResultsArray[count++];
    result = cublasLtMatmulHeuristicResult_t{};
    result.algo = encodeAlgorithm(chosen);
    result.workspaceSize = workspace;
    result.state = CUBLAS_STATUS_SUCCESS;
    // 128 x 128 tiles over the multiprocessors.
    result.wavesCount = static_cast<float>((p.m + 127) / 128 * ((p.n + 127) / 128) *
                                           static_cast<uint64_t>(p.batch)) /
                        static_cast<float>(context->device->multiprocessors);
  }
  *returnAlgoCount = count;
  if (count == 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, function,
                  absl::StrCat("no algorithm for ", shapeOf(p),
                               " within the preference's reduction scheme "
                               "mask ",
                               reductions));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle,
                              cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A,
                              cublasLtMatrixLayout_t aDesc, const void *B,
                              cublasLtMatrixLayout_t bDesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t cDesc,
                              void *D, cublasLtMatrixLayout_t dDesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char *function = "cublasLtMatmul";
  Context *context = findContext(handle);
  if (!context)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, function,
                  "the handle was never created or is already destroyed");
  MatmulDesc *desc = findMatmulDesc(computeDesc);
  if (!desc)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  "computeDesc is not a live matmul descriptor");
  Problem p;
  if (cublasStatus_t status = resolveProblem(function, *context->device, *desc,
                                             aDesc, bDesc, cDesc, dDesc, p);
      status != CUBLAS_STATUS_SUCCESS)
    return status;
  auto invalid = [&](const std::string &why) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  absl::StrCat(shapeOf(p), ": ", why));
  };
  if (!alpha || !beta || !A || !B || !D)
    return invalid("alpha, beta, A, B and D must not be null");
  // Host pointer mode reads alpha and beta now (a device pointer would
  // fault on the host); device mode when it runs.
  if (!p.devicePointers)
    for (const void *scalar : {alpha, beta})
      if (checkDeviceRange(scalar, 4, "alpha or beta").ok())
        return invalid(absl::StrCat(
            scalar == alpha ? "alpha" : "beta",
            " is device memory, but CUBLASLT_MATMUL_DESC_POINTER_MODE is host"));
  float hostAlpha = p.devicePointers ? 0.0f : *static_cast<const float *>(alpha);
  float hostBeta = p.devicePointers ? 0.0f : *static_cast<const float *>(beta);
  if (!C && (p.devicePointers || hostBeta != 0.0f))
    return invalid("C is null but beta may be nonzero");
  p.a.data = A, p.b.data = B, p.c.data = C, p.d.data = D;
  // In place, C and D are one matrix.
  if (C == D && (p.c.type != p.d.type || p.c.ld != p.d.ld ||
                 (p.batch > 1 && p.c.stride != p.d.stride)))
    return invalid("C == D (in place) needs Cdesc to match Ddesc");
  // D is written while A and B (and C, unless it is D) are read.
  auto overlaps = [&](const Matrix &input) {
    uintptr_t from = reinterpret_cast<uintptr_t>(input.data);
    uintptr_t dFrom = reinterpret_cast<uintptr_t>(p.d.data);
    return input.data && from < dFrom + p.d.spanBytes() &&
           dFrom < from + input.spanBytes();
  };
  bool readsC = p.devicePointers || hostBeta != 0.0f;
  for (const Matrix *input : {&p.a, &p.b, &p.c})
    if (input != &p.c || (readsC && C != D))
      if (overlaps(*input))
        return invalid(absl::StrCat("D overlaps ", input == &p.a   ? "A"
                                                   : input == &p.b ? "B"
                                                                   : "C"));
  if (p.aScaleMode != ScaleMode::Scalar && (!p.aScale || !p.bScale))
    return invalid("block scale modes need CUBLASLT_MATMUL_DESC_A_SCALE_POINTER "
                   "and B_SCALE_POINTER");
  for (auto [scales, mode, name] :
       {std::make_tuple(p.aScale, p.aScaleMode, "A_SCALE_POINTER"),
        std::make_tuple(p.bScale, p.bScaleMode, "B_SCALE_POINTER"),
        std::make_tuple(p.dScale, ScaleMode::Scalar, "D_SCALE_POINTER")}) {
    uintptr_t need = mode == ScaleMode::Scalar ? 4 : 16;
    if (reinterpret_cast<uintptr_t>(scales) % need != 0)
      return invalid(absl::StrCat("CUBLASLT_MATMUL_DESC_", name, " ",
                                  reinterpret_cast<uintptr_t>(scales),
                                  " is not aligned to ", need, " bytes"));
  }
  if (reinterpret_cast<uintptr_t>(p.amaxD) % 4 != 0)
    return invalid("CUBLASLT_MATMUL_DESC_AMAX_D_POINTER is not aligned to 4 bytes");

  Chosen chosen;
  if (algo) {
    if (!decodeAlgorithm(*algo, chosen))
      return invalid("algo is not one cublasLtMatmulAlgoGetHeuristic returned");
    if (chosen.fingerprint != p.fingerprint)
      return invalid("algo was chosen for other types, transposes, scale modes "
                     "or pointer mode");
    if (!algorithmApplies(chosen.algorithm, p))
      return invalid(absl::StrCat("algo (split k) does not apply to k ", p.k));
  } else {
    // cuBLASLt's implicit heuristic: the first algorithm that fits the
    // workspace, assuming only the alignment the operands have.
    chosen.algorithm = algorithmApplies(Algorithm::SplitK, p) &&
                               algorithmWorkspace(Algorithm::SplitK, p) <=
                                   workspaceSizeInBytes
                           ? Algorithm::SplitK
                           : Algorithm::Sequential;
    for (int i = 0; i < 4; ++i)
      chosen.alignment[i] = neededAlignment(p, *matrices(p, i));
  }
  uint64_t needed = algorithmWorkspace(chosen.algorithm, p);
  if (workspaceSizeInBytes < needed || (needed > 0 && !workspace))
    return invalid(absl::StrCat("the algorithm needs ", needed,
                                " bytes of workspace, given ",
                                workspace ? workspaceSizeInBytes : 0));
  for (int i = 0; i < 4; ++i) {
    const Matrix &m = *matrices(p, i);
    if (!m.data)
      continue;
    uint32_t actual = matrixAlignment(m, 256);
    if (actual < chosen.alignment[i] || actual < neededAlignment(p, m))
      return invalid(absl::StrCat(
          kMatrixNames[i], " at ", reinterpret_cast<uintptr_t>(m.data),
          " (leading dimension ", m.ld, ") is aligned to ", actual,
          " bytes; the algorithm assumes ",
          std::max(chosen.alignment[i], neededAlignment(p, m))));
  }

  const float *alphaAt = static_cast<const float *>(alpha);
  const float *betaAt = static_cast<const float *>(beta);
  Algorithm algorithm = chosen.algorithm;
  cudaError_t queued = enqueue(
      stream, absl::StrCat("cublasLtMatmul ", shapeOf(p)),
      [p, algorithm, alphaAt, betaAt, hostAlpha, hostBeta, workspace] {
        computeMatmul(p, algorithm, alphaAt, betaAt, hostAlpha, hostBeta,
                      workspace);
      });
  if (queued == cudaErrorInvalidResourceHandle)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  "stream is not a live stream");
  if (queued != cudaSuccess)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED, function,
                  absl::StrCat("the device has failed: ",
                               cudaGetErrorName(queued)));
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
