//===- PinnedStaging.cpp - device reads through pinned memory -------------===//
#include "PinnedStaging.h"

#include "CudaStatus.h"
#include "DeviceStep.h"

#include <algorithm>
#include <cstring>

namespace moe::rt::cuda {

PinnedStaging::~PinnedStaging() {
  // After a failed wait the device may still write any of them (and a
  // stuck device would hold cudaFreeHost too): the process keeps them.
  if (!abandoned.empty())
    return;
  for (void *old : outgrown)
    cudaFreeHost(old);
  if (buffer)
    cudaFreeHost(buffer);
}

absl::Status PinnedStaging::reserve(size_t wanted) {
  if (buffer && bytes >= wanted)
    return absl::OkStatus();
  size_t grown = std::min(kMaxStagingBytes,
                          std::max({wanted, 2 * bytes, kFirstStagingBytes}));
  void *fresh = nullptr;
  MOE_CUDA_OK(cudaMallocHost(&fresh, grown));
  if (buffer)
    outgrown.push_back(buffer);
  buffer = fresh;
  bytes = grown;
  return absl::OkStatus();
}

absl::Status PinnedStaging::read(void *host, const void *device, size_t size,
                                 cudaStream_t stream, CollectiveWatch *watch) {
  auto *to = static_cast<uint8_t *>(host);
  const auto *from = static_cast<const uint8_t *>(device);
  for (size_t done = 0; done < size;) {
    size_t piece = std::min(size - done, kMaxStagingBytes);
    MOE_CUDA_TRY(reserve(piece));
    MOE_CUDA_OK(cudaMemcpyAsync(buffer, from + done, piece,
                                cudaMemcpyDeviceToHost, stream));
    if (absl::Status waited = synchronize(stream, watch); !waited.ok()) {
      abandoned.push_back(buffer);
      buffer = nullptr;
      bytes = 0;
      return waited;
    }
    std::memcpy(to + done, buffer, piece);
    done += piece;
  }
  return absl::OkStatus();
}

} // namespace moe::rt::cuda
