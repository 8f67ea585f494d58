//===- AttentionShape.h - shapes the attention kernels take ----*- C++ -*-===//
//
// Private to the CUDA backend: the checks both attention implementations
// (Attention.cu's fp32 kernels, FlashAttention.cu's tensor-core ones) make
// before any launch.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_ATTENTIONSHAPE_H
#define MOE_LIB_RUNTIME_CUDA_ATTENTIONSHAPE_H

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <cstdint>

namespace moe::rt::cuda {

/// Rejects shapes a kernel cannot run: negative sizes, heads that are not
/// whole groups of the kv heads (h / group would name a missing kv head,
/// or divide by zero), heads wider than `maxHeadDim`.
inline absl::Status checkAttentionShape(const char *what, int64_t B, int64_t S,
                                        int64_t heads, int64_t kvHeads,
                                        int64_t headDim, int64_t maxHeadDim) {
  if (B < 0 || S < 0 || heads < 0 || kvHeads < 0 || headDim < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative size (B ", B, ", S ", S, ", heads ",
                     heads, ", kvHeads ", kvHeads, ", headDim ", headDim, ")"));
  if (heads > 0 && (kvHeads == 0 || heads % kvHeads != 0))
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": heads (", heads,
                     ") is not a multiple of kvHeads (", kvHeads, ")"));
  if (headDim > maxHeadDim)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": headDim ", headDim, " exceeds ", maxHeadDim));
  return absl::OkStatus();
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_ATTENTIONSHAPE_H
