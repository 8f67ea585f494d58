//===- PinnedStaging.h - device reads through pinned memory -----*- C++ -*-===//
//
// Private to the CUDA backend: how the host reads device memory while NCCL
// collectives may be in flight. A copy from the device into pageable host
// memory may return only once it has completed (cuda_runtime_api.h, "API
// synchronization behavior": "For transfers between device memory and
// pageable host memory, the function might be synchronous with respect to
// host"; drivers are), so behind a collective whose peer hangs the host
// would block inside cudaMemcpyAsync, and the CollectiveWatch, which polls
// with a deadline and aborts the communicators, would never poll. A copy
// into pinned memory is asynchronous: the host returns, waits with
// synchronize(stream, watch), and copies the bytes out once they are there.
//
// The staging buffer is the backend's, and a copy may land in it after a
// failed wait (an abort that did not end what the copy waits behind): the
// buffer of a read whose wait failed is never reused or freed, and nothing
// it holds reaches the caller. Buffers change only between reads: they
// grow (doubling, up to kMaxStagingBytes; a longer read goes in pieces),
// and an outgrown buffer is freed with the others when the staging goes,
// since cudaFreeHost may synchronise the device, which inside a step
// could mean waiting behind a hung collective.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_PINNEDSTAGING_H
#define MOE_LIB_RUNTIME_CUDA_PINNEDSTAGING_H

#include "CollectiveWatch.h"

#include "absl/status/status.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace moe::rt::cuda {

class PinnedStaging {
public:
  /// The largest buffer; a longer read goes through it in pieces.
  static constexpr size_t kMaxStagingBytes = size_t{32} << 20;
  /// The first buffer's size (reads are mostly scalars and counts).
  static constexpr size_t kFirstStagingBytes = size_t{64} << 10;

  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging &) = delete;
  PinnedStaging &operator=(const PinnedStaging &) = delete;

  /// Copies `bytes` of device memory at `device` into `host` once `stream`
  /// reaches the copy, waiting with synchronize(stream, watch). On an error
  /// `host` may hold the pieces read before it; the device writes nothing
  /// into `host`, then or later.
  absl::Status read(void *host, const void *device, size_t bytes,
                    cudaStream_t stream, CollectiveWatch *watch);

  /// The bytes the buffer in use holds (0 before the first read).
  size_t capacity() const { return bytes; }
  /// Whether a read's wait failed: its buffer, and every other, is kept
  /// until the process ends.
  bool abandonedAny() const { return !abandoned.empty(); }

private:
  /// Makes the buffer in use hold at least `wanted` bytes.
  absl::Status reserve(size_t wanted);

  void *buffer = nullptr;
  size_t bytes = 0;
  /// Outgrown buffers, freed when the staging goes.
  std::vector<void *> outgrown;
  /// Buffers of reads whose wait failed: the device may still write them.
  std::vector<void *> abandoned;
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_PINNEDSTAGING_H
