//===- Memory.h - device memory as the other calls see it ---*- C++ -*-===//
//
// Private to the CUDA runtime subset of lib/Runtime/VirtualGpu: what the
// copies and the synchronisation calls need of the allocations (Memory.cpp).
// The allocations have two views: the host's (allocated at the cudaMalloc*
// call, freed at the cudaFree* call), which a call checks its arguments
// against, and the streams' (live from the allocation's place in stream
// order to the free's), which checkDeviceRange checks work against.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_MEMORY_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_MEMORY_H

#include <cuda_runtime_api.h>

#include <cstddef>

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

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_MEMORY_H
