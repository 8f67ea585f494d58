//===- PinnedMemory.cpp - the virtual GPU's pinned host memory ------------===//
//
// cudaMallocHost, cudaHostAlloc and cudaFreeHost: page-locked host memory,
// which is ordinary host memory plus a registry of its ranges. Nothing reads
// or writes it differently; what differs is how the copies synchronise
// (Copies.cpp): the runtime documents a copy from the device into pinned
// memory as asynchronous, and one into pageable memory as one that may
// return only once it has completed.
//
// Strict where the runtime is silent or undefined: new pinned memory is
// poison (0xff bytes), as device memory is, since cudaMallocHost does not
// clear it; cudaFreeHost is not documented to wait for the copies that use
// the memory, so it does not, and a copy that runs after the free faults
// instead of writing into memory the host gave back (the allocation stays
// until the last such copy has gone).
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Memory.h"
#include "VirtualGpu/Runtime.h"

#include "absl/strings/str_format.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace moe::rt::virtual_gpu {

struct PinnedAllocation {
  uint8_t *base;
  size_t size;
  /// Which pinned allocation of the process this is, and which call made
  /// it: "cudaMallocHost", "cudaHostAlloc".
  uint64_t number;
  const char *madeBy;
  /// Set (under the registry's lock) by cudaFreeHost or cudaDeviceReset.
  const char *freedBy = nullptr;

  ~PinnedAllocation() { std::free(base); }
};

namespace {

/// Page-locking works on whole pages.
constexpr size_t kPinnedAlignment = 4096;
constexpr uint8_t kPinnedPoison = 0xff;

struct PinnedRegistry {
  std::mutex mutex;
  /// The live allocations by base address.
  std::map<uintptr_t, std::shared_ptr<PinnedAllocation>> live;
  uint64_t allocations = 0;
};

/// Never destroyed: stream work may still use it while the process exits.
PinnedRegistry &registry() {
  static PinnedRegistry *instance = new PinnedRegistry;
  return *instance;
}

std::string describe(const PinnedAllocation &allocation) {
  return absl::StrFormat("the %d-byte pinned allocation at %p (%s #%d)",
                         allocation.size,
                         static_cast<const void *>(allocation.base),
                         allocation.madeBy, allocation.number);
}

/// Unregisters `it`; the memory goes once no copy holds it. Caller holds
/// the lock.
void release(
    PinnedRegistry &r,
    std::map<uintptr_t, std::shared_ptr<PinnedAllocation>>::iterator it,
    const char *how) {
  it->second->freedBy = how;
  r.live.erase(it);
}

cudaError_t allocatePinned(void **ptr, size_t size, const char *madeBy) {
  if (cudaError_t error = checkCall())
    return error;
  if (!ptr)
    return failed(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0)
    return cudaSuccess;
  size_t rounded =
      (size + kPinnedAlignment - 1) / kPinnedAlignment * kPinnedAlignment;
  auto *base =
      static_cast<uint8_t *>(std::aligned_alloc(kPinnedAlignment, rounded));
  if (!base)
    return failed(cudaErrorMemoryAllocation);
  std::memset(base, kPinnedPoison, rounded);
  PinnedRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto allocation = std::make_shared<PinnedAllocation>();
  allocation->base = base;
  allocation->size = size;
  allocation->number = ++r.allocations;
  allocation->madeBy = madeBy;
  r.live[reinterpret_cast<uintptr_t>(base)] = std::move(allocation);
  *ptr = base;
  return cudaSuccess;
}

} // namespace

std::shared_ptr<PinnedAllocation> findPinned(const void *p, size_t bytes) {
  PinnedRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto address = reinterpret_cast<uintptr_t>(p);
  auto it = r.live.upper_bound(address);
  if (it == r.live.begin())
    return nullptr;
  const std::shared_ptr<PinnedAllocation> &allocation = std::prev(it)->second;
  size_t offset = address - std::prev(it)->first;
  if (offset >= allocation->size || bytes > allocation->size - offset)
    return nullptr;
  return allocation;
}

bool pinnedWhenRun(const PinnedAllocation &allocation, const void *p,
                   const char *what) {
  const char *freedBy;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    freedBy = allocation.freedBy;
  }
  if (!freedBy)
    return true;
  fault(cudaErrorIllegalAddress,
        absl::StrFormat("%s: %p lies in %s, freed by %s before the copy ran",
                        what, p, describe(allocation), freedBy));
  return false;
}

void releaseAllPinnedMemory() {
  PinnedRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  while (!r.live.empty())
    release(r, r.live.begin(), "cudaDeviceReset");
}

} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return allocatePinned(ptr, size, "cudaMallocHost");
}

/// The flags' memory is the same host memory here. cudaHostAllocMapped is
/// refused: kernels would need the allocation as device memory, which the
/// emulation's device ranges (checkDeviceRange) do not include.
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  if ((flags & ~(cudaHostAllocPortable | cudaHostAllocWriteCombined)) != 0) {
    if (cudaError_t error = checkCall())
      return error;
    return failed(cudaErrorInvalidValue);
  }
  return allocatePinned(pHost, size, "cudaHostAlloc");
}

cudaError_t cudaFreeHost(void *ptr) {
  if (!selectedDevice())
    return failed(cudaErrorNoDevice);
  if (!ptr)
    return stickyOr(cudaSuccess);
  PinnedRegistry &r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.live.end())
      return failed(cudaErrorInvalidValue);
    // Pending copies keep the memory; their work finds it freed.
    std::memset(it->second->base, kPinnedPoison, it->second->size);
    release(r, it, "cudaFreeHost");
  }
  return stickyOr(cudaSuccess);
}

} // extern "C"
