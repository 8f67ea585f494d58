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
#include "absl/types/span.h"

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
  // The warp collective it waits in: which one (an intrinsic's name), its
  // mask and its operands.
  const char *collective = nullptr;
  unsigned mask = 0;
  uint64_t value = 0;
  int sourceLane = 0;
  uint64_t result = 0;
};

/// The lanes of a warp waiting in one collective (one mask).
struct WarpGroup {
  unsigned mask;
  const char *collective;
  int arrived;
  /// The lanes of the mask: when all have arrived, the collective is done.
  int expected;
};

/// A block being run: its threads, barrier counts and shared memory.
struct BlockRun {
  const Grid *launch = nullptr;
  uint3 blockIdx{};
  /// The block's threads: the first `count` of the OS thread's pool.
  std::vector<BlockThread> *threads = nullptr;
  int count = 0;
  std::vector<int> runnable;
  size_t next = 0;
  int atBarrier = 0, done = 0;
  BlockThread *current = nullptr;
  /// Per warp, the collectives lanes wait in.
  std::vector<std::vector<WarpGroup>> warps;
  // Shared memory: the dynamic part first, then each static array in the
  // order the block first declares them; each is followed by a guard band.
  unsigned char *shared = nullptr;
  size_t sharedUsed = 0, staticBytes = 0;
  std::vector<std::pair<const void *, unsigned char *>> statics;
  std::vector<std::pair<unsigned char *, size_t>> guards;
  /// Per warp, for warpScratch(); made on first use.
  std::vector<std::unique_ptr<unsigned char[]>> warpScratch;
  /// The block's orders: xorshift64*, seeded from the run's generator.
  uint64_t random = 1;
  bool faulted = false;

  BlockThread &thread(int id) { return (*threads)[id]; }
  uint64_t nextRandom() {
    random ^= random >> 12;
    random ^= random << 25;
    random ^= random >> 27;
    return random * 0x2545f4914f6cdd1dULL;
  }
};

// Initial-exec: read on every shuffle, and a dlopen'ed module's default
// (global-dynamic) model would call __tls_get_addr each time.
__attribute__((tls_model("initial-exec"))) thread_local BlockRun *runningBlock =
    nullptr;

bool sameCollective(const char *a, const char *b) {
  return a == b || std::strcmp(a, b) == 0;
}

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

/// Queues `ids` to run, in a random order after those already queued.
template <typename Ids> void makeRunnable(BlockRun &block, const Ids &ids) {
  // Drop what already ran, so a long kernel's queue does not grow.
  if (block.next == block.runnable.size()) {
    block.runnable.clear();
    block.next = 0;
  } else if (block.next > 4096) {
    block.runnable.erase(block.runnable.begin(),
                         block.runnable.begin() + block.next);
    block.next = 0;
  }
  size_t from = block.runnable.size();
  for (int id : ids) {
    block.thread(id).waiting = Waiting::Nothing;
    block.runnable.push_back(id);
  }
  for (size_t i = block.runnable.size(); i > from + 1; --i) {
    size_t j = from + block.nextRandom() % (i - from);
    std::swap(block.runnable[i - 1], block.runnable[j]);
  }
}

/// The current fiber waits: straight on to the next runnable thread, or
/// back to the scheduler (runBlock) when there is none, which then finds
/// the block done or deadlocked.
void yieldToScheduler(BlockRun &block) {
  BlockThread *self = block.current;
  if (block.faulted || block.next == block.runnable.size()) {
    self->fiber->suspend();
    return;
  }
  BlockThread *next = &block.thread(block.runnable[block.next++]);
  if (next == self)
    return;
  block.current = next;
  self->fiber->transferTo(*next->fiber);
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

/// The collective of `thread`'s warp that names lane `lane`, if any.
const WarpGroup *groupNaming(BlockRun &block, const BlockThread &thread,
                             int lane) {
  for (const WarpGroup &group : block.warps[warpOf(thread)])
    if (group.mask >> lane & 1u)
      return &group;
  return nullptr;
}

/// A lane the collective `group` waits for can no longer arrive: fail.
void failCollective(BlockRun &block, const WarpGroup &group, int warp,
                    const BlockThread &other, const char *why) {
  failBlock(block, absl::StrCat("lanes of warp ", warp, " wait in ",
                                group.collective, " (mask 0x",
                                absl::Hex(group.mask), ") for lane ",
                                laneOf(other), " (", describeThread(other),
                                "), which ", why));
}

/// A thread ended or arrived at __syncthreads: whether every thread is now
/// at the barrier (release it), or some ended while others wait.
void checkBlockBarrier(BlockRun &block) {
  if (block.atBarrier == 0 || block.atBarrier + block.done < block.count)
    return;
  if (block.done > 0) {
    std::vector<std::string> ended;
    for (int id = 0; id < block.count && ended.size() < 4; ++id)
      if (block.thread(id).waiting == Waiting::Done)
        ended.push_back(describeThread(block.thread(id)));
    failBlock(block,
              absl::StrCat(block.atBarrier,
                           " threads wait at __syncthreads that ", block.done,
                           " threads never reach (they ended: ",
                           absl::StrJoin(ended, ", "),
                           block.done > 4 ? ", ..." : "", ")"));
    return;
  }
  block.atBarrier = 0;
  std::vector<int> all(block.count);
  std::iota(all.begin(), all.end(), 0);
  makeRunnable(block, all);
}

/// A thread ended: the collectives waiting for it can never complete.
void threadEnded(BlockRun &block, BlockThread &thread) {
  thread.waiting = Waiting::Done;
  ++block.done;
  if (const WarpGroup *group = groupNaming(block, thread, laneOf(thread))) {
    failCollective(block, *group, warpOf(thread), thread, "ended");
    return;
  }
  checkBlockBarrier(block);
}

void threadMain(void *argument) {
  auto *thread = static_cast<BlockThread *>(argument);
  runningBlock->launch->body();
  threadEnded(*runningBlock, *thread);
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

/// This OS thread's CUDA threads, reused block after block (a fiber is
/// restarted rather than made anew).
std::vector<BlockThread> &threadPool() {
  static thread_local std::vector<BlockThread> pool;
  return pool;
}

/// Runs one block; false on a fault.
bool runBlock(BlockRun &block) {
  const Grid &launch = *block.launch;
  int count = static_cast<int>(launch.block.x * launch.block.y * launch.block.z);
  std::vector<BlockThread> &pool = threadPool();
  if (static_cast<int>(pool.size()) < count)
    pool.resize(count);
  block.threads = &pool;
  block.count = count;
  for (int linear = 0; linear < count; ++linear) {
    BlockThread &thread = pool[linear];
    thread.linear = linear;
    thread.waiting = Waiting::Nothing;
    thread.index.threadIdx = {
        static_cast<unsigned>(linear % launch.block.x),
        static_cast<unsigned>(linear / launch.block.x % launch.block.y),
        static_cast<unsigned>(linear / (launch.block.x * launch.block.y))};
    thread.index.blockIdx = block.blockIdx;
    thread.index.blockDim = launch.block;
    thread.index.gridDim = launch.grid;
    if (thread.fiber)
      thread.fiber->restart(&threadMain, &thread);
    else
      thread.fiber = std::make_unique<Fiber>(&threadMain, &thread);
  }
  block.warps.assign((count + kWarpSize - 1) / kWarpSize, {});
  size_t arenaBytes;
  block.shared = sharedArena(arenaBytes);
  block.sharedUsed = (launch.dynamicSharedBytes + 127) / 128 * 128;
  poison(block.shared, launch.dynamicSharedBytes,
         block.shared + block.sharedUsed, block);
  block.sharedUsed += kGuardBytes;

  block.runnable.reserve(2 * count);
  std::vector<int> all(count);
  std::iota(all.begin(), all.end(), 0);
  makeRunnable(block, all);
  while (!block.faulted) {
    if (block.next == block.runnable.size()) {
      block.runnable.clear();
      block.next = 0;
      if (block.done == count)
        break;
      std::vector<std::string> waits;
      for (int id = 0; id < count && waits.size() < 6; ++id)
        if (block.thread(id).waiting != Waiting::Done)
          waits.push_back(absl::StrCat(describeThread(block.thread(id)),
                                       " in ",
                                       describeWait(block.thread(id))));
      failBlock(block, absl::StrCat("deadlock: no thread can go on (",
                                    absl::StrJoin(waits, "; "), ")"));
      break;
    }
    block.current = &block.thread(block.runnable[block.next++]);
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
    block.random = randomBits() | 1;
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
  if (const WarpGroup *group = groupNaming(block, self, laneOf(self)))
    failFromThread(absl::StrCat("arrives at __syncthreads while lanes of its "
                                "warp wait for it in ",
                                group->collective, " (mask 0x",
                                absl::Hex(group->mask), ")"));
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
  int warp = warpOf(self);
  int base = warp * kWarpSize;
  int lanesInWarp = std::min(kWarpSize, block.count - base);
  if (lanesInWarp < kWarpSize && (mask >> lanesInWarp) != 0)
    failFromThread(absl::StrCat(collective, " with mask 0x", absl::Hex(mask),
                                " in a warp of ", lanesInWarp,
                                " threads: the mask names lanes that do not "
                                "exist"));
  self.collective = collective;
  self.mask = mask;
  self.value = value;
  self.sourceLane = sourceLane;
  std::vector<WarpGroup> &groups = block.warps[warp];
  WarpGroup *group = nullptr;
  for (WarpGroup &each : groups) {
    if (each.mask == mask) {
      if (!sameCollective(each.collective, collective))
        failFromThread(absl::StrCat("arrives in ", collective, " (mask 0x",
                                    absl::Hex(mask), ") while lanes it names "
                                    "wait in ",
                                    each.collective));
      group = &each;
    } else if (each.mask & mask) {
      failFromThread(absl::StrCat(
          "arrives in ", collective, " (mask 0x", absl::Hex(mask),
          ") while lanes it names wait in ", each.collective, " (mask 0x",
          absl::Hex(each.mask), ")"));
    }
  }
  if (!group) {
    // The first lane here: every lane it names must be able to come.
    for (unsigned bits = mask & ~(1u << lane); bits; bits &= bits - 1) {
      int other = __builtin_ctz(bits);
      const BlockThread &named = block.thread(base + other);
      if (named.waiting == Waiting::Done || named.waiting == Waiting::Block)
        failFromThread(absl::StrCat(
            "waits in ", collective, " (mask 0x", absl::Hex(mask),
            ") for lane ", other, " (", describeThread(named), "), which ",
            named.waiting == Waiting::Done ? "ended" : "waits at __syncthreads"));
    }
    groups.push_back({mask, collective, 0, __builtin_popcount(mask)});
    group = &groups.back();
  }
  self.waiting = Waiting::Warp;
  if (++group->arrived < group->expected) {
    yieldToScheduler(block);
    return self.result;
  }
  // Everyone is here: every lane's result, then the others run on (in a
  // random order) and this one goes on at once.
  BlockThread *warpThreads = &block.thread(base);
  uint64_t votes = 0;
  bool isBallot = sameCollective(collective, "__ballot_sync");
  if (isBallot)
    for (unsigned bits = mask; bits; bits &= bits - 1) {
      int other = __builtin_ctz(bits);
      if (warpThreads[other].value)
        votes |= uint64_t{1} << other;
    }
  int lanes[kWarpSize];
  int released = 0;
  for (unsigned bits = mask; bits; bits &= bits - 1) {
    int other = __builtin_ctz(bits);
    BlockThread &named = warpThreads[other];
    if (isBallot) {
      named.result = votes;
    } else {
      if (!(mask >> named.sourceLane & 1u))
        failFromThread(absl::StrCat(describeThread(named), " reads lane ",
                                    named.sourceLane, " in ", collective,
                                    ", which mask 0x", absl::Hex(mask),
                                    " does not name"));
      named.result = warpThreads[named.sourceLane].value;
    }
    if (other != lane)
      lanes[released++] = base + other;
  }
  groups.erase(groups.begin() + (group - groups.data()));
  makeRunnable(block, absl::MakeSpan(lanes, released));
  self.waiting = Waiting::Nothing;
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
