//===- CudaStatus.h - CUDA, cuBLASLt and NCCL results as Status -*- C++ -*-===//
//
// Private to the CUDA backend. Every call into CUDA libraries goes through
// one of these, so an error names the call, the library's own message and
// where it happened, and never aborts.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_CUDASTATUS_H
#define MOE_LIB_RUNTIME_CUDA_CUDASTATUS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace moe::rt::cuda {

/// OK, or an error "what: cudaErrorX (message)". Clears CUDA's sticky
/// last error of non-fatal failures.
absl::Status cudaStatus(cudaError_t result, const char *what);
absl::Status cublasStatus(cublasStatus_t result, const char *what);
/// A query's answer (cudaEventQuery, cudaStreamQuery): true when the work
/// is done, false when not yet (cudaErrorNotReady, which is cleared), else
/// the error.
absl::StatusOr<bool> queryDone(cudaError_t result, const char *what);

} // namespace moe::rt::cuda

/// Returns from the enclosing function (absl::Status or StatusOr) on error.
#define MOE_CUDA_OK(call)                                                     \
  do {                                                                        \
    if (absl::Status moe_cuda_status = ::moe::rt::cuda::cudaStatus(           \
            (call), #call);                                                   \
        !moe_cuda_status.ok())                                                \
      return moe_cuda_status;                                                 \
  } while (0)
#define MOE_CUBLAS_OK(call)                                                   \
  do {                                                                        \
    if (absl::Status moe_cublas_status = ::moe::rt::cuda::cublasStatus(       \
            (call), #call);                                                   \
        !moe_cublas_status.ok())                                              \
      return moe_cublas_status;                                               \
  } while (0)

/// Returns from the enclosing function when `expr` (an absl::Status) fails.
#define MOE_CUDA_TRY(expr)                                                     \
  do {                                                                         \
    if (absl::Status moe_try_status = (expr); !moe_try_status.ok())            \
      return moe_try_status;                                                   \
  } while (0)

#endif // MOE_LIB_RUNTIME_CUDA_CUDASTATUS_H
