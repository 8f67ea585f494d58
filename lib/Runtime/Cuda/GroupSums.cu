//===- GroupSums.cu - double and count sums over ranks, in rank order -----===//
//
// The device side of comm::sumOverGroup (moe/Runtime/Comm/GroupSums.h): the
// ranks' values gathered as bits (NcclGroup::sumInRankOrder), then added
// here in group-rank order, ((v0 + v1) + v2) ..., so a loss or norm summed
// over ranks is bitwise the one the CPU's ranks compute, on every rank.
// Gather and scatter move a global norm's squares of one group in and out
// of a contiguous block.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "Launch.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {
namespace {

template <typename T>
__global__ void sumRowsKernel(const T *rows, int64_t parts, int64_t n,
                              T *out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    T sum = rows[i];
    for (int64_t r = 1; r < parts; ++r)
      sum += rows[r * n + i];
    out[i] = sum;
  }
}

__global__ void gatherDoublesKernel(const double *from, const int64_t *at,
                                    int64_t n, double *to) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    to[i] = from[at[i]];
}

__global__ void scatterDoublesKernel(const double *from, const int64_t *at,
                                     int64_t n, double *to) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    to[at[i]] = from[i];
}

template <typename T>
absl::Status sumRowsOn(const T *rows, int64_t parts, int64_t n, T *out,
                       cudaStream_t stream) {
  if (parts < 1 || n < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "sumRowsInRankOrder: expected parts >= 1 and n >= 0, found parts = ",
        parts, ", n = ", n));
  if (n == 0)
    return absl::OkStatus();
  return launch("sumRowsInRankOrder", sumRowsKernel<T>, gridFor(n), kThreads, 0,
                stream, rows, parts, n, out);
}

} // namespace

absl::Status sumRowsInRankOrder(const double *rows, int64_t parts, int64_t n,
                                double *out, cudaStream_t stream) {
  return sumRowsOn(rows, parts, n, out, stream);
}

absl::Status sumRowsInRankOrder(const unsigned long long *rows, int64_t parts,
                                int64_t n, unsigned long long *out,
                                cudaStream_t stream) {
  return sumRowsOn(rows, parts, n, out, stream);
}

absl::Status gatherDoubles(const double *from, const int64_t *at, int64_t n,
                           double *to, cudaStream_t stream) {
  if (n <= 0)
    return absl::OkStatus();
  return launch("gatherDoubles", gatherDoublesKernel, gridFor(n), kThreads, 0,
                stream, from, at, n, to);
}

absl::Status scatterDoubles(const double *from, const int64_t *at, int64_t n,
                            double *to, cudaStream_t stream) {
  if (n <= 0)
    return absl::OkStatus();
  return launch("scatterDoubles", scatterDoublesKernel, gridFor(n), kThreads, 0,
                stream, from, at, n, to);
}

} // namespace moe::rt::cuda
