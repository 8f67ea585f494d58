//===- CudaStatus.cpp - CUDA, cuBLASLt and NCCL results as Status ---------===//
#include "CudaStatus.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {

absl::Status cudaStatus(cudaError_t result, const char *what) {
  if (result == cudaSuccess)
    return absl::OkStatus();
  // A failed call leaves its error as CUDA's last error; take it, so that
  // the next check does not report it again.
  cudaGetLastError();
  absl::StatusCode code = result == cudaErrorMemoryAllocation
                              ? absl::StatusCode::kResourceExhausted
                              : absl::StatusCode::kFailedPrecondition;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(result),
                                         " (", cudaGetErrorString(result),
                                         ")"));
}

absl::StatusOr<bool> queryDone(cudaError_t result, const char *what) {
  if (result == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  if (absl::Status status = cudaStatus(result, what); !status.ok())
    return status;
  return true;
}

absl::Status cublasStatus(cublasStatus_t result, const char *what) {
  if (result == CUBLAS_STATUS_SUCCESS)
    return absl::OkStatus();
  absl::StatusCode code = result == CUBLAS_STATUS_ALLOC_FAILED
                              ? absl::StatusCode::kResourceExhausted
                          : result == CUBLAS_STATUS_INVALID_VALUE ||
                                  result == CUBLAS_STATUS_NOT_SUPPORTED
                              ? absl::StatusCode::kInvalidArgument
                              : absl::StatusCode::kFailedPrecondition;
  return absl::Status(
      code, absl::StrCat(what, ": ", cublasLtGetStatusName(result), " (",
                         cublasLtGetStatusString(result), ")"));
}

} // namespace moe::rt::cuda
