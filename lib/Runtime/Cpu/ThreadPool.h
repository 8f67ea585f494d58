//===- ThreadPool.h - The one thread pool of the CPU kernels ----*- C++ -*-===//
//
// Private to lib/Runtime/Cpu. Every kernel that uses more than one core does
// so through parallelFor, and OpenBLAS itself runs on one thread: two pools
// on the same cores (OpenBLAS's threads spin after each GEMM) slowed the
// step down more than the second core sped it up.
//
// Determinism: parallelFor's tasks are fixed by the caller (never by which
// threads are free), each task computes the same bits on whichever thread
// runs it, and anything summed across tasks is combined afterwards in task
// order by the caller. So results depend on the thread count (which decides
// how work is cut into tasks) but never on timing.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CPU_THREADPOOL_H
#define MOE_LIB_RUNTIME_CPU_THREADPOOL_H

#include <algorithm>
#include <cstdint>

namespace moe::rt::cpu::detail {

/// The threads a kernel may cut its work for: the pool's size, or 1 on a
/// thread that is already running a task (a nested region runs serially).
int availableThreads();

using TaskFunction = void (*)(const void *context, int64_t task, int worker);

/// Runs fn(context, task, worker) for every task in [0, tasks) and returns
/// when all are done. `worker` is in [0, availableThreads()) and no two
/// tasks run with the same worker at the same time, so it may index
/// per-worker scratch. Tasks run serially on the caller when the pool has
/// one thread, when called from inside a task, or while another thread
/// holds the pool.
void runTasks(int64_t tasks, TaskFunction fn, const void *context);

/// runTasks with a callable f(task, worker).
template <typename Function>
void parallelFor(int64_t tasks, const Function &f) {
  runTasks(
      tasks,
      [](const void *context, int64_t task, int worker) {
        (*static_cast<const Function *>(context))(task, worker);
      },
      &f);
}

/// The half-open share [begin, end) of `n` items that part `part` of `parts`
/// takes, with every boundary but the last a multiple of `align`.
struct Share {
  int64_t begin, end;
};
Share shareOf(int64_t n, int64_t parts, int64_t part, int64_t align = 1);

/// Items per thread below which an element-wise loop is not worth cutting:
/// a region costs a few microseconds, about what 16 Ki elements take.
inline constexpr int64_t kElementGrain = int64_t{1} << 14;

/// The same for a loop over rows of `width` elements: whole rows holding at
/// least kElementGrain elements.
inline int64_t rowGrain(int64_t width) {
  return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, width));
}

/// fn(begin, end) over consecutive shares of [0, n), one per available
/// thread but none smaller than `grain` items, in parallel: for loops whose
/// items are independent, so that the shares give the bits of one pass.
template <typename Function>
void forEachShare(int64_t n, int64_t grain, const Function &fn) {
  int64_t parts =
      n / grain < 2 ? 1 : std::min<int64_t>(availableThreads(), n / grain);
  if (parts <= 1) {
    if (n > 0)
      fn(int64_t{0}, n);
    return;
  }
  parallelFor(parts, [&](int64_t part, int) {
    Share share = shareOf(n, parts, part);
    fn(share.begin, share.end);
  });
}

} // namespace moe::rt::cpu::detail

#endif // MOE_LIB_RUNTIME_CPU_THREADPOOL_H
