//===- MemoryPool.cpp - the virtual GPU's stream-ordered allocator --------===//
//
// cudaMallocAsync and cudaFreeAsync on the device's default pool, and the
// pool's attributes. A free happens in stream order: when it runs, the
// memory is poisoned and goes back to the pool. The pool reuses blocks as
// eagerly as stream order allows: a cudaMallocAsync on the stream that
// freed a block of its size class takes the most recently freed one at
// once, even before the free has run; other streams take a block only once
// its free has run. No other reuse policy is modelled, so the pool's reuse
// attributes are refused.
//
// The pool's books: reserved bytes are the blocks it holds (in use or
// free), used bytes the blocks whose allocation has run and whose free has
// not, both in size classes. At each synchronisation it hands its free
// blocks back to the host above the release threshold.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Allocations.h"
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Streams.h"

#include <cstring>

namespace moe::rt::virtual_gpu {
namespace {

/// The default pool's handle: nothing looks behind it.
cudaMemPool_t defaultPool() {
  static char tag;
  return reinterpret_cast<cudaMemPool_t>(&tag);
}

void eraseFrom(std::vector<Block *> &list, Block *block) {
  list.erase(std::remove(list.begin(), list.end(), block), list.end());
}

/// A pool block's free, in stream order: the memory is poisoned and, unless
/// the same stream already took the block again, goes back to the pool.
void runPoolFree(Block *block, uint64_t generation, const std::string &how) {
  Memory &m = memory();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    checkGuard(*block, how);
    block->live = false;
    block->freedBy = how;
    m.used -= block->capacity;
  }
  // Nobody may touch the block now: it is neither live nor free yet.
  std::memset(block->base, kPoison, block->capacity);
  std::lock_guard<std::mutex> lock(m.mutex);
  writeGuard(*block, block->capacity);
  if (block->hostState == HostState::FreePending &&
      block->freeGeneration == generation) {
    eraseFrom(m.pendingFrees[{block->pendingOn, block->capacity}], block);
    block->hostState = HostState::Free;
    m.freeBlocks[block->capacity].push_back(block);
  }
}

} // namespace
} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
  const void *calledFrom = __builtin_return_address(0);
  if (cudaError_t error = checkCall())
    return error;
  if (!devPtr)
    return failed(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (!isStream(stream))
    return failed(cudaErrorInvalidResourceHandle);
  if (size == 0)
    return cudaSuccess;
  stream = canonicalStream(stream);
  Memory &m = memory();
  Block *block = nullptr;
  // What the block was, to put it back if the stream refuses the work.
  HostState previous = HostState::Free;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    size_t capacity = sizeClass(size);
    std::vector<Block *> &sameStream = m.pendingFrees[{stream, capacity}];
    std::vector<Block *> &anyStream = m.freeBlocks[capacity];
    if (!sameStream.empty()) {
      block = sameStream.back();
      sameStream.pop_back();
      previous = HostState::FreePending;
    } else if (!anyStream.empty()) {
      block = anyStream.back();
      anyStream.pop_back();
    } else {
      block = newBlock(m, size, /*pooled=*/true);
      if (!block) {
        // The pool gives its free blocks back before the device runs out.
        trimPool(m, 0);
        block = newBlock(m, size, /*pooled=*/true);
      }
      if (!block)
        return failed(cudaErrorMemoryAllocation);
    }
    block->hostState = HostState::Allocated;
    block->hostSize = size;
    block->number = ++m.allocations;
    block->calledFrom = calledFrom;
  }
  cudaError_t error = enqueue(stream, "cudaMallocAsync", [block, size] {
    Memory &m = memory();
    std::lock_guard<std::mutex> lock(m.mutex);
    block->size = size;
    block->guardReported = false;
    writeGuard(*block, size);
    block->live = true;
    m.used += block->capacity;
    m.usedHigh = std::max(m.usedHigh, m.used);
  });
  if (error != cudaSuccess) {
    std::lock_guard<std::mutex> lock(m.mutex);
    block->hostState = previous;
    if (previous == HostState::FreePending)
      m.pendingFrees[{block->pendingOn, block->capacity}].push_back(block);
    else
      m.freeBlocks[block->capacity].push_back(block);
    return failed(error);
  }
  *devPtr = block->base;
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
  if (cudaError_t error = checkCall())
    return error;
  if (!devPtr)
    return cudaSuccess;
  if (!isStream(stream))
    return failed(cudaErrorInvalidResourceHandle);
  stream = canonicalStream(stream);
  Memory &m = memory();
  Block *block;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    block = containing(m, devPtr);
    // Not the start of a pool allocation the host holds: cudaMalloc's
    // memory, a pointer inside one, a double free.
    if (!block || block->base != devPtr || !block->pooled ||
        block->hostState != HostState::Allocated)
      return failed(cudaErrorInvalidValue);
    generation = ++m.freeGenerations;
    block->hostState = HostState::FreePending;
    block->freeGeneration = generation;
    block->pendingOn = stream;
    m.pendingFrees[{stream, block->capacity}].push_back(block);
  }
  std::string how = "cudaFreeAsync on " + describeStream(stream);
  cudaError_t error =
      enqueue(stream, "cudaFreeAsync", [block, generation, how] {
        runPoolFree(block, generation, how);
      });
  if (error != cudaSuccess) {
    std::lock_guard<std::mutex> lock(m.mutex);
    eraseFrom(m.pendingFrees[{stream, block->capacity}], block);
    block->hostState = HostState::Allocated;
    return failed(error);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  if (cudaError_t error = checkCall())
    return error;
  if (!pool)
    return failed(cudaErrorInvalidValue);
  if (device != 0)
    return failed(cudaErrorInvalidDevice);
  *pool = defaultPool();
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                    void *value) {
  if (cudaError_t error = checkCall())
    return error;
  if (pool != defaultPool() || !value)
    return failed(cudaErrorInvalidValue);
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  uint64_t *out = static_cast<uint64_t *>(value);
  switch (attr) {
  case cudaMemPoolAttrReleaseThreshold:
    *out = m.releaseThreshold;
    return cudaSuccess;
  case cudaMemPoolAttrReservedMemCurrent:
    *out = m.reserved;
    return cudaSuccess;
  case cudaMemPoolAttrReservedMemHigh:
    *out = m.reservedHigh;
    return cudaSuccess;
  case cudaMemPoolAttrUsedMemCurrent:
    *out = m.used;
    return cudaSuccess;
  case cudaMemPoolAttrUsedMemHigh:
    *out = m.usedHigh;
    return cudaSuccess;
  default:
    // The reuse policies are the emulation's own (see the file header).
    return failed(cudaErrorNotSupported);
  }
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                    void *value) {
  if (cudaError_t error = checkCall())
    return error;
  if (pool != defaultPool() || !value)
    return failed(cudaErrorInvalidValue);
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  uint64_t in = *static_cast<const uint64_t *>(value);
  switch (attr) {
  case cudaMemPoolAttrReleaseThreshold:
    m.releaseThreshold = in;
    return cudaSuccess;
  // The high-water marks may only be reset (to the current value), with 0.
  case cudaMemPoolAttrReservedMemHigh:
    if (in != 0)
      return failed(cudaErrorInvalidValue);
    m.reservedHigh = m.reserved;
    return cudaSuccess;
  case cudaMemPoolAttrUsedMemHigh:
    if (in != 0)
      return failed(cudaErrorInvalidValue);
    m.usedHigh = m.used;
    return cudaSuccess;
  case cudaMemPoolAttrReservedMemCurrent:
  case cudaMemPoolAttrUsedMemCurrent:
    return failed(cudaErrorInvalidValue);
  default:
    return failed(cudaErrorNotSupported);
  }
}

} // extern "C"
