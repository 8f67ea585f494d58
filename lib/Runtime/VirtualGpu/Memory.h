//===- Memory.h - device memory as the other calls see it ---*- C++ -*-===//
//
// Private to the CUDA runtime subset of lib/Runtime/VirtualGpu: what the
// copies and the synchronisation calls need of the allocations (Memory.cpp).
// The allocations have two views: the host's (allocated at the cudaMalloc*
// call, freed at the cudaFree* call), which a call checks its arguments
// against, and the streams' (live from the allocation's place in stream
// order to the free's), which checkDeviceRange checks work against. Pinned
// (page-locked) host memory has a registry of its own (PinnedMemory.cpp):
// a copy's host side is pinned or pageable, and the runtime documents each
// kind of copy's synchronisation by that.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_MEMORY_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_MEMORY_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace moe::rt::virtual_gpu {

/// Whether `p` lies in memory the device allocated (live or not): where
/// cudaMemcpyDefault infers a device side.
bool isDeviceAddress(const void *p);

/// cudaSuccess when [p, p + bytes) lies inside one allocation the host has
/// not freed; else cudaErrorInvalidValue.
cudaError_t checkAllocated(const void *p, size_t bytes);

/// What a synchronisation does to memory: checks the guard band of every
/// live allocation (a changed one is a fault), and hands the pool's free
/// blocks back above its release threshold.
void afterSynchronization();

/// cudaDeviceReset: every allocation goes back to the host (a later access
/// through a pointer to one is reported as freed by the reset).
void releaseAllMemory();

/// One allocation of pinned host memory (cudaMallocHost, cudaHostAlloc).
/// A copy holds a reference to the one its host side lies in, from the call
/// until its work has run: memory that cudaFreeHost frees meanwhile stays
/// until then, and the work finds it freed (pinnedWhenRun).
struct PinnedAllocation;

/// The live pinned allocation [p, p + bytes) lies in, or null: the range is
/// pageable memory (it is not all inside one pinned allocation).
std::shared_ptr<PinnedAllocation> findPinned(const void *p, size_t bytes);

/// Checks, in a copy's work, that `allocation` (which holds `p`) was not
/// freed since the call: a copy whose pinned host memory was freed before
/// it ran faults, naming `what`, and returns false.
bool pinnedWhenRun(const PinnedAllocation &allocation, const void *p,
                   const char *what);

/// cudaDeviceReset: every pinned allocation is freed (documented: the reset
/// destroys cudaMallocHost's allocations too).
void releaseAllPinnedMemory();

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_MEMORY_H
