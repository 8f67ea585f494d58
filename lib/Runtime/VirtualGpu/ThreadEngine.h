//===- ThreadEngine.h - CUDA thread blocks as fibers ------------*- C++ -*-===//
//
// Private to lib/Runtime/VirtualGpu: runs a kernel launch on the CPU. Each
// block runs on the launching stream's worker thread; each CUDA thread of
// the block is a fiber, switched only where the kernel synchronises
// (__syncthreads, __syncwarp, shuffles, ballots), so a barrier costs a few
// context switches instead of an OS thread's wake-up.
//
// It is strict where a device would be undefined:
//  * a barrier, shuffle or ballot completes only when every thread it names
//    (the block; the lanes of the mask) arrives at the same kind of barrier;
//    a thread that exits or waits elsewhere instead is a fault naming the
//    kernel, the block, the threads and the barriers;
//  * shared memory (static and dynamic) is poisoned when a block starts and
//    guard-banded, and the guard is checked when it ends;
//  * blocks run in a seeded random order, and the threads of a block run
//    in a seeded random order between barriers.
//
// A fault stops the launch and sets the device's sticky error (Runtime.h).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_THREADENGINE_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_THREADENGINE_H

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace moe::rt::virtual_gpu {

/// A kernel launch as the engine runs it.
struct Grid {
  /// Which launch, for faults: "add (bf16)".
  std::string name;
  dim3 grid, block;
  size_t dynamicSharedBytes = 0;
  /// What the kernel's static plus dynamic shared memory may add up to: the
  /// device's per-block figure, or the kernel's opt-in
  /// (cudaFuncAttributeMaxDynamicSharedMemorySize).
  size_t sharedLimitBytes = 0;
  /// The kernel's body for the current thread (its indices are in
  /// currentThread()).
  std::function<void()> body;
};

/// Runs every thread of every block of `launch` to completion, on the
/// calling thread. On a fault, calls fault() (Runtime.h) and returns false.
bool runGrid(const Grid &launch);

/// The indices of the CUDA thread running on this fiber.
struct ThreadIndex {
  uint3 threadIdx, blockIdx;
  dim3 blockDim, gridDim;
};
const ThreadIndex &currentThread();

/// The current block's storage for the static shared array declared at
/// `site` (MOE_BLOCK_SHARED): one per block, poisoned when the block
/// starts, the same pointer for all its threads.
void *blockShared(const void *site, size_t bytes, size_t alignment);
/// The current block's dynamic shared memory (MOE_DYNAMIC_SHARED).
void *dynamicShared(size_t alignment);

/// Warp and block synchronisation for the kernel shim. `mask` names the
/// lanes taking part; the calling lane must be one of them.
void syncThreads();
void syncWarp(unsigned mask);
/// The value of lane `sourceLane` (of this warp) among `mask`'s lanes.
uint64_t shuffleIndexed(unsigned mask, uint64_t value, int sourceLane,
                        int width, const char *what);
/// One bit per lane of `mask` whose predicate is true.
unsigned ballot(unsigned mask, bool predicate);
/// Scratch shared by the lanes of the calling thread's warp (at most 4
/// KiB), for warp-wide operations that trade operands (WMMA's mma).
/// Poisoned when the block starts.
void *warpScratch(size_t bytes);
/// The calling thread's lane in its warp.
int currentLane();
/// Fails the launch from inside a kernel (`__trap()`, a misaligned vector
/// access): the block stops and the device's sticky error is set.
[[noreturn]] void trapFromThread(const char *what);

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_THREADENGINE_H
