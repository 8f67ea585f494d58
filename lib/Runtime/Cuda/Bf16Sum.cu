//===- Bf16Sum.cu - sums over ranks of BF16 blocks ------------------------===//
//
// Mixed precision's reductions (docs/precision.md, Collectives): a sum over
// ranks of BF16 values adds them in fp32 in rank order and rounds once, to
// nearest even, as the CPU does (comm::Group sums its fp32 images of the
// BF16 values in rank order, and the result is rounded once). NCCL's own
// BF16 reductions round after every hop of the ring, in ring order, so the
// BF16 collectives move the ranks' BF16 blocks with NCCL and add them here.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "Launch.h"

#include "absl/strings/str_cat.h"

#include <cuda_bf16.h>

namespace moe::rt::cuda {
namespace {

__global__ void sumBf16RowsKernel(const uint16_t *rows, int64_t parts,
                                  int64_t n, uint16_t *out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    // BF16 is fp32's upper half: each term widens exactly.
    float sum = __uint_as_float(uint32_t{rows[i]} << 16);
    for (int64_t r = 1; r < parts; ++r)
      sum = __fadd_rn(sum, __uint_as_float(uint32_t{rows[r * n + i]} << 16));
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
  }
}

} // namespace

absl::Status sumBf16Rows(const uint16_t *rows, int64_t parts, int64_t n,
                         uint16_t *out, cudaStream_t stream) {
  if (parts < 1 || n < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "sumBf16Rows: expected parts >= 1 and n >= 0, found parts = ", parts,
        ", n = ", n));
  if (n == 0)
    return absl::OkStatus();
  return launch("sumBf16Rows", sumBf16RowsKernel, gridFor(n), kThreads, 0,
                stream, rows, parts, n, out);
}

} // namespace moe::rt::cuda
