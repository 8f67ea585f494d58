//===- Allocations.h - the registry of device allocations ------*- C++ -*-===//
//
// Private to Memory.cpp (the registry, cudaMalloc, cudaFree) and
// MemoryPool.cpp (the stream-ordered pool): what an allocation is, and the
// registry's operations. Everything here is guarded by Memory::mutex.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_ALLOCATIONS_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_ALLOCATIONS_H

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe::rt::virtual_gpu {

/// cudaMalloc's alignment, and the granule of the pool's size classes.
constexpr size_t kAlignment = 256;
/// The guard band past each allocation's size class; the bytes between
/// its size and its class are guarded too.
constexpr size_t kGuardBytes = 256;
constexpr uint8_t kPoison = 0xff;

/// The pool's size class of `bytes`: whole granules of kAlignment.
inline size_t sizeClass(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment *
         kAlignment;
}

/// Where the host has the allocation (the calls' view).
enum class HostState { Allocated, FreePending, Free };

struct Block {
  uint8_t *base;
  /// The size class: the bytes before the guard band.
  size_t capacity;
  /// From the default pool (cudaMallocAsync), else cudaMalloc.
  bool pooled;
  /// Which allocation of the process this is, and who called for it.
  uint64_t number = 0;
  const void *calledFrom = nullptr;
  // The host's view.
  size_t hostSize = 0;
  HostState hostState = HostState::Allocated;
  /// Which cudaFreeAsync call the pending free is, and on which stream.
  uint64_t freeGeneration = 0;
  cudaStream_t pendingOn = nullptr;
  // The streams' view.
  size_t size = 0;
  bool live = false;
  /// How the last free that ran was made: "cudaFreeAsync on stream 0x...".
  std::string freedBy;
  bool guardReported = false;
};

/// An allocation whose memory went back to the host: enough to name it.
struct Released {
  size_t extent;
  std::string description;
};

struct Memory {
  std::mutex mutex;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks;
  /// Pool blocks whose free has run, by size class; the last is the most
  /// recently freed.
  std::map<size_t, std::vector<Block *>> freeBlocks;
  /// Pool blocks whose cudaFreeAsync was called on a stream, by stream and
  /// size class.
  std::map<std::pair<cudaStream_t, size_t>, std::vector<Block *>>
      pendingFrees;
  std::map<uintptr_t, Released> released;
  std::deque<uintptr_t> releasedOrder;
  uint64_t allocations = 0;
  uint64_t freeGenerations = 0;
  /// cudaMalloc's bytes; the pool's reserved and used bytes.
  uint64_t mallocBytes = 0;
  uint64_t reserved = 0, reservedHigh = 0;
  uint64_t used = 0, usedHigh = 0;
  uint64_t releaseThreshold = 0;
};

/// The process's registry; never destroyed (stream work may use it while
/// the process exits).
Memory &memory();

/// "the 100-byte allocation at 0x... (cudaMalloc #3, called from ...)".
std::string describe(const Block &block);
/// The block whose memory (guard band included) holds `p`, or null.
Block *containing(Memory &m, const void *p);
/// Writes the guard pattern from `from` to the end of the guard band.
void writeGuard(Block &block, size_t from);
/// Checks the guard band past the block's size: a changed byte is a fault
/// (reported once per allocation); `when` says where it was found.
void checkGuard(Block &block, const std::string &when);
/// A new block of `bytes`' size class, poisoned and guarded, registered;
/// null when the device's memory or the host's is exhausted.
Block *newBlock(Memory &m, size_t bytes, bool pooled);
/// Gives the block's memory back to the host, remembering what it was.
void releaseBlock(Memory &m, Block *block, const std::string &how);
/// Hands free pool blocks back to the host until the pool holds no more
/// than `keep` bytes.
void trimPool(Memory &m, uint64_t keep);

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_ALLOCATIONS_H
