//===- ThreadEngine.cpp - CUDA thread blocks as fibers --------------------===//
//
// One block at a time runs on the calling (stream worker) thread. Its
// threads are fibers kept in a run queue; a thread runs until it reaches a
// barrier, a warp collective or its end, then the next runnable one runs.
// A barrier releases its threads in a fresh seeded order, so code that is
// correct only for one interleaving of the threads between two barriers
// (a missing __syncthreads, a missing __syncwarp) meets the other orders.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/ThreadEngine.h"

#include "VirtualGpu/Fiber.h"
#include "VirtualGpu/Runtime.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

// device_launch_parameters.h's builtin, which kernels read as `warpSize`.
extern "C" const int warpSize = 32;

namespace moe::rt::virtual_gpu {

namespace {

constexpr unsigned char kPoison = 0xff;
constexpr unsigned char kGuard = 0xa5;
constexpr size_t kGuardBytes = 256;
constexpr int kWarpSize = 32;

enum class Waiting { Nothing, Block, Warp, Done };

/// One CUDA thread of the running block.
struct BlockThread {
  std::unique_ptr<Fiber> fiber;
  ThreadIndex index;
  int linear = 0;
  Waiting waiting = Waiting::Nothing;
  // The warp collective it waits in: which one (an intrinsic's name, the
  // same pointer for the same intrinsic), its mask and its operands.
  const char *collective = nullptr;
  unsigned mask = 0;
  uint64_t value = 0;
  int sourceLane = 0;
  uint64_t result = 0;
};

/// A block being run: its threads, barrier counts and shared memory.
struct BlockRun {
  const Grid *launch = nullptr;
  uint3 blockIdx{};
  std::vector<BlockThread> threads;
  std::vector<int> runnable;
  size_t next = 0;
  int atBarrier = 0, done = 0;
  BlockThread *current = nullptr;
  // Shared memory: the dynamic part first, then each static array in the
  // order the block first declares them; each is followed by a guard band.
  unsigned char *shared = nullptr;
  size_t sharedUsed = 0, staticBytes = 0;
  std::vector<std::pair<const void *, unsigned char *>> statics;
  std::vector<std::pair<unsigned char *, size_t>> guards;
  /// Per warp, for warpScratch(); made on first use.
  std::vector<std::unique_ptr<unsigned char[]>> warpScratch;
  bool faulted = false;
};

thread_local BlockRun *runningBlock = nullptr;

/// The shared memory a block may reach: the largest opt-in of any model
/// plus the guard bands, allocated once per OS thread.
unsigned char *sharedArena(size_t &bytes) {
  struct Free {
    void operator()(unsigned char *p) const { std::free(p); }
  };
  // Page-aligned, as a block's shared memory is at least 128-byte aligned
  // on the device (kernels declare their dynamic arrays __align__(128)).
  static thread_local std::unique_ptr<unsigned char, Free> arena;
  bytes = 256 * 1024 + 64 * kGuardBytes;
  if (!arena)
    arena.reset(static_cast<unsigned char *>(std::aligned_alloc(4096, bytes)));
  return arena.get();
}

std::string describeBlock(const BlockRun &block) {
  return absl::StrCat("kernel '", block.launch->name, "' block (",
                      block.blockIdx.x, ",", block.blockIdx.y, ",",
                      block.blockIdx.z, ")");
}

std::string describeThread(const BlockThread &thread) {
  const uint3 &t = thread.index.threadIdx;
  return absl::StrCat("thread (", t.x, ",", t.y, ",", t.z, ")");
}

/// Stops the block: the launch fails with `message`. Called on the
/// scheduler's side or from a fiber (which then never runs again).
void failBlock(BlockRun &block, const std::string &message) {
  if (!block.faulted)
    fault(cudaErrorLaunchFailure,
          absl::StrCat(describeBlock(block), ": ", message));
  block.faulted = true;
}

/// Shuffles `ids` with the run's seeded generator.
void shuffleOrder(std::vector<int> &ids, size_t from) {
  for (size_t i = ids.size(); i > from + 1; --i) {
    size_t j = from + randomBits() % (i - from);
    std::swap(ids[i - 1], ids[j]);
  }
}

void makeRunnable(BlockRun &block, std::vector<int> ids) {
  size_t from = block.runnable.size();
  for (int id : ids) {
    block.threads[id].waiting = Waiting::Nothing;
    block.runnable.push_back(id);
  }
  shuffleOrder(block.runnable, from);
}

/// Back to the scheduler from the current fiber.
void yieldToScheduler(BlockRun &block) {
  BlockThread *self = block.current;
  self->fiber->suspend();
  runningBlock = &block;
}

/// From a fiber: the kernel did something a device would not allow.
[[noreturn]] void failFromThread(const std::string &message) {
  BlockRun &block = *runningBlock;
  failBlock(block, absl::StrCat(describeThread(*block.current), ": ", message));
  // Never resumed: the scheduler stops the launch.
  block.current->waiting = Waiting::Done;
  block.current->fiber->finish();
}

int warpOf(const BlockThread &thread) { return thread.linear / kWarpSize; }
int laneOf(const BlockThread &thread) { return thread.linear % kWarpSize; }

std::string describeWait(const BlockThread &thread) {
  switch (thread.waiting) {
  case Waiting::Block:
    return "__syncthreads";
  case Waiting::Warp:
    return absl::StrCat(thread.collective, " (mask 0x",
                        absl::Hex(thread.mask), ")");
  case Waiting::Done:
    return "its end";
  case Waiting::Nothing:
    return "running";
  }
  return "?";
}

/// A thread ended or arrived at __syncthreads: whether every thread is now
/// at the barrier (release it), or some ended while others wait.
void checkBlockBarrier(BlockRun &block) {
  int total = static_cast<int>(block.threads.size());
  if (block.atBarrier == 0 || block.atBarrier + block.done < total)
    return;
  if (block.done > 0) {
    std::vector<std::string> ended;
    for (const BlockThread &thread : block.threads)
      if (thread.waiting == Waiting::Done && ended.size() < 4)
        ended.push_back(describeThread(thread));
    failBlock(block,
              absl::StrCat(block.atBarrier,
                           " threads wait at __syncthreads that ", block.done,
                           " threads never reach (they ended: ",
                           absl::StrJoin(ended, ", "),
                           block.done > 4 ? ", ..." : "", ")"));
    return;
  }
  block.atBarrier = 0;
  std::vector<int> all(block.threads.size());
  std::iota(all.begin(), all.end(), 0);
  makeRunnable(block, std::move(all));
}

/// Whether the collective `self` waits in can complete: every lane of its
/// mask waits in the same one. A lane that ended or waits elsewhere fails
/// the block (on a device: undefined behaviour, often a hang).
void checkWarpCollective(BlockRun &block, BlockThread &self) {
  int base = warpOf(self) * kWarpSize;
  std::vector<int> lanes;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!(self.mask >> lane & 1u))
      continue;
    BlockThread &other = block.threads[base + lane];
    if (other.waiting == Waiting::Nothing)
      return; // not there yet
    if (other.waiting != Waiting::Warp ||
        std::strcmp(other.collective, self.collective) != 0 ||
        other.mask != self.mask) {
      failBlock(block,
                absl::StrCat(describeThread(self), " waits in ",
                             describeWait(self), " for lane ", lane, " (",
                             describeThread(other), "), which ",
                             other.waiting == Waiting::Done ? "ended"
                                                            : "waits in ",
                             other.waiting == Waiting::Done
                                 ? ""
                                 : describeWait(other)));
      return;
    }
    lanes.push_back(base + lane);
  }
  // Everyone is here: compute every lane's result, then release them.
  for (int id : lanes) {
    BlockThread &lane = block.threads[id];
    if (std::strcmp(lane.collective, "__ballot_sync") == 0) {
      uint64_t bits = 0;
      for (int other : lanes)
        if (block.threads[other].value)
          bits |= uint64_t{1} << laneOf(block.threads[other]);
      lane.result = bits;
    } else {
      int source = base + lane.sourceLane;
      if (!(self.mask >> lane.sourceLane & 1u)) {
        failBlock(block, absl::StrCat(describeThread(lane), " reads lane ",
                                      lane.sourceLane, " in ", lane.collective,
                                      ", which mask 0x", absl::Hex(self.mask),
                                      " does not name"));
        return;
      }
      lane.result = block.threads[source].value;
    }
  }
  makeRunnable(block, std::move(lanes));
}

/// A thread ended: the collectives waiting for it can never complete.
void threadEnded(BlockRun &block, BlockThread &thread) {
  thread.waiting = Waiting::Done;
  ++block.done;
  int base = warpOf(thread) * kWarpSize;
  for (int lane = 0; lane < kWarpSize && !block.faulted; ++lane) {
    int id = base + lane;
    if (id >= static_cast<int>(block.threads.size()))
      break;
    BlockThread &other = block.threads[id];
    if (other.waiting == Waiting::Warp && (other.mask >> laneOf(thread) & 1u))
      checkWarpCollective(block, other);
  }
  if (!block.faulted)
    checkBlockBarrier(block);
}

void threadMain(void *argument) {
  auto *thread = static_cast<BlockThread *>(argument);
  BlockRun &block = *runningBlock;
  block.launch->body();
  BlockRun &after = *runningBlock;
  threadEnded(after, *thread);
  thread->fiber->finish();
}

void poison(unsigned char *at, size_t bytes, unsigned char *guard,
            BlockRun &block) {
  std::memset(at, kPoison, bytes);
  std::memset(guard, kGuard, kGuardBytes);
  block.guards.emplace_back(guard, kGuardBytes);
}

bool guardsIntact(const BlockRun &block) {
  for (const auto &[guard, bytes] : block.guards)
    for (size_t i = 0; i < bytes; ++i)
      if (guard[i] != kGuard)
        return false;
  return true;
}

/// Runs one block; false on a fault.
bool runBlock(BlockRun &block) {
  const Grid &launch = *block.launch;
  int count = static_cast<int>(launch.block.x * launch.block.y * launch.block.z);
  block.threads.clear();
  block.threads.resize(count);
  for (int linear = 0; linear < count; ++linear) {
    BlockThread &thread = block.threads[linear];
    thread.linear = linear;
    thread.index.threadIdx = {
        static_cast<unsigned>(linear % launch.block.x),
        static_cast<unsigned>(linear / launch.block.x % launch.block.y),
        static_cast<unsigned>(linear / (launch.block.x * launch.block.y))};
    thread.index.blockIdx = block.blockIdx;
    thread.index.blockDim = launch.block;
    thread.index.gridDim = launch.grid;
    thread.fiber = std::make_unique<Fiber>(&threadMain, &thread);
  }
  size_t arenaBytes;
  block.shared = sharedArena(arenaBytes);
  block.sharedUsed = (launch.dynamicSharedBytes + 127) / 128 * 128;
  poison(block.shared, launch.dynamicSharedBytes,
         block.shared + block.sharedUsed, block);
  block.sharedUsed += kGuardBytes;

  std::vector<int> all(count);
  std::iota(all.begin(), all.end(), 0);
  makeRunnable(block, std::move(all));
  while (!block.faulted) {
    if (block.next == block.runnable.size()) {
      if (block.done == count)
        break;
      std::vector<std::string> waits;
      for (const BlockThread &thread : block.threads)
        if (thread.waiting != Waiting::Done && waits.size() < 6)
          waits.push_back(absl::StrCat(describeThread(thread), " in ",
                                       describeWait(thread)));
      failBlock(block, absl::StrCat("deadlock: no thread can go on (",
                                    absl::StrJoin(waits, "; "), ")"));
      break;
    }
    block.current = &block.threads[block.runnable[block.next++]];
    if (block.next == block.runnable.size()) {
      block.runnable.clear();
      block.next = 0;
    }
    block.current->fiber->resume();
  }
  if (!block.faulted && !guardsIntact(block))
    failBlock(block, "a thread wrote past the block's shared memory");
  return !block.faulted;
}

} // namespace

bool runGrid(const Grid &launch) {
  uint64_t blocks = uint64_t{launch.grid.x} * launch.grid.y * launch.grid.z;
  // Blocks run in a seeded random order: no block may rely on another
  // having run (or not) before it.
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size(); i > 1; --i)
    std::swap(order[i - 1], order[randomBits() % i]);
  for (uint64_t linear : order) {
    BlockRun block;
    block.launch = &launch;
    block.blockIdx = {
        static_cast<unsigned>(linear % launch.grid.x),
        static_cast<unsigned>(linear / launch.grid.x % launch.grid.y),
        static_cast<unsigned>(linear / (uint64_t{launch.grid.x} * launch.grid.y))};
    BlockRun *outer = runningBlock;
    runningBlock = &block;
    bool ok = runBlock(block);
    runningBlock = outer;
    if (!ok)
      return false;
  }
  return true;
}

const ThreadIndex &currentThread() { return runningBlock->current->index; }

void *blockShared(const void *site, size_t bytes, size_t alignment) {
  BlockRun &block = *runningBlock;
  for (const auto &[known, at] : block.statics)
    if (known == site)
      return at;
  size_t arenaBytes;
  sharedArena(arenaBytes);
  size_t at = (block.sharedUsed + alignment - 1) / alignment * alignment;
  block.staticBytes += bytes;
  size_t limit = std::max(block.launch->sharedLimitBytes,
                          selectedDevice()->sharedBytesPerBlock);
  if (block.launch->dynamicSharedBytes + block.staticBytes > limit ||
      at + bytes + kGuardBytes > arenaBytes)
    failFromThread(absl::StrCat(
        "its shared memory (", block.launch->dynamicSharedBytes,
        " bytes dynamic + ", block.staticBytes,
        " bytes static) exceeds the block's limit of ", limit, " bytes"));
  unsigned char *storage = block.shared + at;
  poison(storage, bytes, storage + bytes, block);
  block.sharedUsed = at + bytes + kGuardBytes;
  block.statics.emplace_back(site, storage);
  return storage;
}

void *dynamicShared(size_t alignment) {
  // The arena is 128-byte aligned by construction only if new[] gives that;
  // check instead of assuming.
  unsigned char *at = runningBlock->shared;
  if (reinterpret_cast<uintptr_t>(at) % alignment)
    failFromThread(absl::StrCat("dynamic shared memory at ", alignment,
                                "-byte alignment is not available"));
  return at;
}

void syncThreads() {
  BlockRun &block = *runningBlock;
  BlockThread &self = *block.current;
  self.waiting = Waiting::Block;
  ++block.atBarrier;
  checkBlockBarrier(block);
  yieldToScheduler(block);
}

namespace {
uint64_t warpCollective(const char *collective, unsigned mask, uint64_t value,
                        int sourceLane) {
  BlockRun &block = *runningBlock;
  BlockThread &self = *block.current;
  int lane = laneOf(self);
  if (!(mask >> lane & 1u))
    failFromThread(absl::StrCat(collective, " with mask 0x", absl::Hex(mask),
                                ", which does not name the calling lane ",
                                lane));
  int base = warpOf(self) * kWarpSize;
  int lanesInWarp = std::min<int>(kWarpSize,
                                  static_cast<int>(block.threads.size()) - base);
  if (lanesInWarp < kWarpSize && (mask >> lanesInWarp) != 0)
    failFromThread(absl::StrCat(collective, " with mask 0x", absl::Hex(mask),
                                " in a warp of ", lanesInWarp,
                                " threads: the mask names lanes that do not "
                                "exist"));
  self.waiting = Waiting::Warp;
  self.collective = collective;
  self.mask = mask;
  self.value = value;
  self.sourceLane = sourceLane;
  checkWarpCollective(block, self);
  yieldToScheduler(block);
  return self.result;
}
} // namespace

void syncWarp(unsigned mask) {
  warpCollective("__syncwarp", mask, 0, laneOf(*runningBlock->current));
}

uint64_t shuffleIndexed(unsigned mask, uint64_t value, int sourceLane,
                        int width, const char *what) {
  (void)width;
  if (sourceLane < 0 || sourceLane >= kWarpSize)
    failFromThread(absl::StrCat(what, " from lane ", sourceLane,
                                ", outside the warp"));
  return warpCollective(what, mask, value, sourceLane);
}

unsigned ballot(unsigned mask, bool predicate) {
  return static_cast<unsigned>(warpCollective(
      "__ballot_sync", mask, predicate ? 1 : 0, laneOf(*runningBlock->current)));
}

int currentLane() { return laneOf(*runningBlock->current); }

void *warpScratch(size_t bytes) {
  constexpr size_t kScratchBytes = 4096;
  BlockRun &block = *runningBlock;
  if (bytes > kScratchBytes)
    failFromThread(absl::StrCat("asks for ", bytes,
                                " bytes of warp scratch (at most ",
                                kScratchBytes, ")"));
  size_t warp = static_cast<size_t>(warpOf(*block.current));
  if (block.warpScratch.size() <= warp)
    block.warpScratch.resize(warp + 1);
  std::unique_ptr<unsigned char[]> &scratch = block.warpScratch[warp];
  if (!scratch) {
    scratch.reset(new unsigned char[kScratchBytes]);
    std::memset(scratch.get(), kPoison, kScratchBytes);
  }
  return scratch.get();
}

void trapFromThread(const char *what) {
  failFromThread(absl::StrCat("trapped: ", what));
}

} // namespace moe::rt::virtual_gpu
