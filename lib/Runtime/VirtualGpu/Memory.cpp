//===- Memory.cpp - the virtual GPU's device memory -----------------------===//
//
// Device memory is host memory that the emulation keeps a registry of:
// every allocation (cudaMalloc, and the default pool's blocks for
// cudaMallocAsync), its views (Memory.h) and how it was freed, so that
// checkDeviceRange can say what is wrong with a pointer a kernel was given.
//
// Strict where a device is undefined: new and freed memory is poison (0xff
// bytes: NaN as fp32 and BF16, -1 as an integer); each allocation is
// followed by a guard band of a known pattern, checked when it is freed and
// at every synchronisation. The pool's blocks are in MemoryPool.cpp.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Allocations.h"
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Memory.h"
#include "VirtualGpu/Streams.h"

#include "absl/strings/str_format.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace moe::rt::virtual_gpu {
namespace {

/// How many freed allocations messages can still name.
constexpr size_t kReleasedRemembered = 4096;

/// The guard pattern: it varies with the offset, so a shifted copy of the
/// guard does not pass for it.
uint8_t guardByte(size_t offset) {
  return static_cast<uint8_t>(0xa5 ^ (offset * 7));
}

/// "moe::rt::cuda::DeviceBuffer::allocate(...)+0x1c", or the address.
std::string describeCode(const void *address) {
  Dl_info info;
  if (!address || !dladdr(address, &info) || !info.dli_sname)
    return absl::StrFormat("%p", address);
  int status = 0;
  char *demangled =
      abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : info.dli_sname;
  std::free(demangled);
  return absl::StrFormat(
      "%s+%#x", name,
      static_cast<const char *>(address) -
          static_cast<const char *>(info.dli_saddr));
}

} // namespace

Memory &memory() {
  static Memory *instance = new Memory;
  return *instance;
}

std::string describe(const Block &block) {
  return absl::StrFormat("the %d-byte allocation at %p (%s #%d, called from "
                         "%s)",
                         block.live ? block.size : block.hostSize,
                         static_cast<const void *>(block.base),
                         block.pooled ? "cudaMallocAsync" : "cudaMalloc",
                         block.number, describeCode(block.calledFrom));
}

/// The block whose memory (guard band included) holds `p`. Caller holds
/// the lock.
Block *containing(Memory &m, const void *p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  auto it = m.blocks.upper_bound(address);
  if (it == m.blocks.begin())
    return nullptr;
  Block *block = std::prev(it)->second.get();
  uintptr_t base = reinterpret_cast<uintptr_t>(block->base);
  return address < base + block->capacity + kGuardBytes ? block : nullptr;
}

void writeGuard(Block &block, size_t from) {
  for (size_t i = from; i < block.capacity + kGuardBytes; ++i)
    block.base[i] = guardByte(i);
}

/// Checks `block`'s guard band past its size: a changed byte is a fault
/// (reported once per allocation). Caller holds the lock.
void checkGuard(Block &block, const std::string &when) {
  if (block.guardReported)
    return;
  for (size_t i = block.size; i < block.capacity + kGuardBytes; ++i) {
    if (block.base[i] == guardByte(i))
      continue;
    block.guardReported = true;
    fault(cudaErrorIllegalAddress,
          absl::StrFormat("%s was written past its end: byte %d of it "
                          "changed (found at %s)",
                          describe(block), i, when));
    return;
  }
}

/// A new block of `bytes`' size class, poisoned and guarded, registered;
/// null when the device's memory or the host's is exhausted. Caller holds
/// the lock.
Block *newBlock(Memory &m, size_t bytes, bool pooled) {
  size_t capacity = sizeClass(bytes);
  if (m.mallocBytes + m.reserved + capacity >
      selectedDevice()->globalMemoryBytes)
    return nullptr;
  auto *base = static_cast<uint8_t *>(
      std::aligned_alloc(kAlignment, capacity + kGuardBytes));
  if (!base)
    return nullptr;
  auto block = std::make_unique<Block>();
  block->base = base;
  block->capacity = capacity;
  block->pooled = pooled;
  std::memset(base, kPoison, capacity);
  writeGuard(*block, capacity);
  // The host may hand out an address a freed allocation had.
  uintptr_t begin = reinterpret_cast<uintptr_t>(base);
  auto stale = m.released.lower_bound(begin);
  while (stale != m.released.end() &&
         stale->first < begin + capacity + kGuardBytes)
    stale = m.released.erase(stale);
  if (stale != m.released.begin() &&
      std::prev(stale)->first + std::prev(stale)->second.extent > begin)
    m.released.erase(std::prev(stale));
  Block *result = block.get();
  m.blocks[begin] = std::move(block);
  if (pooled) {
    m.reserved += capacity;
    m.reservedHigh = std::max(m.reservedHigh, m.reserved);
  } else {
    m.mallocBytes += capacity;
  }
  return result;
}

/// Gives `block`'s memory back to the host, remembering what it was.
/// Caller holds the lock.
void releaseBlock(Memory &m, Block *block, const std::string &how) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(block->base);
  m.released[begin] = Released{block->capacity + kGuardBytes,
                               describe(*block) + ", freed by " + how};
  m.releasedOrder.push_back(begin);
  if (m.releasedOrder.size() > kReleasedRemembered) {
    m.released.erase(m.releasedOrder.front());
    m.releasedOrder.pop_front();
  }
  if (block->pooled)
    m.reserved -= block->capacity;
  else
    m.mallocBytes -= block->capacity;
  std::free(block->base);
  m.blocks.erase(begin);
}

/// Hands free pool blocks back to the host until the pool holds no more
/// than `keep` bytes. Caller holds the lock.
void trimPool(Memory &m, uint64_t keep) {
  for (auto it = m.freeBlocks.begin();
       m.reserved > keep && it != m.freeBlocks.end();) {
    while (m.reserved > keep && !it->second.empty()) {
      Block *block = it->second.back();
      it->second.pop_back();
      releaseBlock(m, block, block->freedBy + ", then released by the pool");
    }
    it = it->second.empty() ? m.freeBlocks.erase(it) : std::next(it);
  }
}

bool isDeviceAddress(const void *p) {
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  return containing(m, p) != nullptr;
}

cudaError_t checkAllocated(const void *p, size_t bytes) {
  if (bytes == 0)
    return cudaSuccess;
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  Block *block = containing(m, p);
  if (!block || block->hostState != HostState::Allocated)
    return cudaErrorInvalidValue;
  size_t offset = static_cast<const uint8_t *>(p) - block->base;
  return offset <= block->hostSize && bytes <= block->hostSize - offset
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

void afterSynchronization() {
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  for (auto &[address, block] : m.blocks)
    if (block->live)
      checkGuard(*block, "a synchronisation");
  trimPool(m, m.releaseThreshold);
}

void releaseAllMemory() {
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  std::vector<Block *> all;
  for (auto &[address, block] : m.blocks)
    all.push_back(block.get());
  m.freeBlocks.clear();
  m.pendingFrees.clear();
  for (Block *block : all)
    releaseBlock(m, block, "cudaDeviceReset");
  m.used = 0;
}

absl::Status checkDeviceRange(const void *p, size_t bytes, const char *what) {
  // Nothing is accessed: a null pointer with no elements is fine.
  if (bytes == 0)
    return absl::OkStatus();
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  if (Block *block = containing(m, p)) {
    if (!block->live)
      return absl::FailedPreconditionError(
          block->freedBy.empty()
              ? absl::StrFormat("%s: %p lies in %s, not allocated yet in "
                                "stream order",
                                what, p, describe(*block))
              : absl::StrFormat("%s: %p lies in %s, freed by %s", what, p,
                                describe(*block), block->freedBy));
    size_t offset = static_cast<const uint8_t *>(p) - block->base;
    if (offset > block->size || bytes > block->size - offset)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: the %d bytes at %p run %d bytes past the end of %s", what,
          bytes, p, offset + bytes - block->size, describe(*block)));
    return absl::OkStatus();
  }
  auto address = reinterpret_cast<uintptr_t>(p);
  auto it = m.released.upper_bound(address);
  if (it != m.released.begin() &&
      address < std::prev(it)->first + std::prev(it)->second.extent)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %p lies in %s", what, p, std::prev(it)->second.description));
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %p is not device memory", what, p));
}

} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  const void *calledFrom = __builtin_return_address(0);
  if (cudaError_t error = checkCall())
    return error;
  if (!devPtr)
    return failed(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0)
    return cudaSuccess;
  Memory &m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  Block *block = newBlock(m, size, /*pooled=*/false);
  if (!block)
    return failed(cudaErrorMemoryAllocation);
  block->number = ++m.allocations;
  block->calledFrom = calledFrom;
  block->hostSize = block->size = size;
  writeGuard(*block, size);
  block->live = true;
  *devPtr = block->base;
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  if (!selectedDevice())
    return failed(cudaErrorNoDevice);
  if (!devPtr)
    return stickyOr(cudaSuccess);
  // As on a device, cudaFree waits for the work already enqueued.
  synchronizeAllStreams();
  Memory &m = memory();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    Block *block = containing(m, devPtr);
    if (!block || block->base != devPtr ||
        block->hostState != HostState::Allocated)
      return failed(cudaErrorInvalidValue);
    checkGuard(*block, "cudaFree");
    if (block->pooled) {
      block->live = false;
      block->freedBy = "cudaFree";
      m.used -= block->capacity;
      std::memset(block->base, kPoison, block->capacity);
      writeGuard(*block, block->capacity);
      block->hostState = HostState::Free;
      m.freeBlocks[block->capacity].push_back(block);
    } else {
      releaseBlock(m, block, "cudaFree");
    }
  }
  afterSynchronization();
  return stickyOr(cudaSuccess);
}

} // extern "C"
