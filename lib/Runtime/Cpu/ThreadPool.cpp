//===- ThreadPool.cpp - The one thread pool of the CPU kernels ------------===//
//
// A fork-join pool: the caller publishes a region (a task count and a
// function), bumps a generation counter, claims tasks itself and waits for
// the workers to leave the region. Tasks are claimed from one atomic
// counter, so a slow core takes fewer of them.
//
// Workers spin briefly on the generation before they sleep: a training step
// opens thousands of regions back to back, and waking a sleeping thread
// costs tens of microseconds on a VM, while a short spin keeps a core that
// has nothing else to do.
//
//===----------------------------------------------------------------------===//

#include "ThreadPool.h"

#include "moe/Runtime/Cpu/Kernels.h"

#include <algorithm>
#include <atomic>
#include <cblas.h>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define MOE_CPU_RELAX() _mm_pause()
#else
#define MOE_CPU_RELAX() std::this_thread::yield()
#endif

namespace moe::rt::cpu {

namespace {
/// How long an idle worker spins before it sleeps.
constexpr auto kSpinTime = std::chrono::microseconds(200);

/// True on the pool's workers, and on a caller while it runs a region's
/// tasks: a region opened from there runs serially.
thread_local bool insideRegion = false;

class ThreadPool {
public:
  explicit ThreadPool(int threads) {
    for (int w = 1; w < threads; ++w)
      workers.emplace_back([this, w] { serve(w); });
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping.store(true, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    for (std::thread &worker : workers)
      worker.join();
  }

  int size() const { return static_cast<int>(workers.size()) + 1; }

  /// Runs the region, or returns false (nothing run) when another thread
  /// holds the pool.
  bool tryRun(int64_t tasks, detail::TaskFunction fn, const void *context) {
    std::unique_lock<std::mutex> region(regionMutex, std::try_to_lock);
    if (!region.owns_lock())
      return false;
    function = fn;
    this->context = context;
    taskCount = tasks;
    nextTask.store(0, std::memory_order_relaxed);
    busyWorkers.store(static_cast<int>(workers.size()),
                      std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex);
      generation.fetch_add(1, std::memory_order_release);
      if (sleepers > 0)
        wake.notify_all();
    }
    insideRegion = true;
    work(0);
    insideRegion = false;
    // Every worker leaves the region before the next one is published.
    for (int spins = 0; busyWorkers.load(std::memory_order_acquire) != 0;
         ++spins)
      if (spins < 4096)
        MOE_CPU_RELAX();
      else
        std::this_thread::yield();
    return true;
  }

private:
  void work(int worker) {
    for (;;) {
      int64_t task = nextTask.fetch_add(1, std::memory_order_relaxed);
      if (task >= taskCount)
        return;
      function(context, task, worker);
    }
  }

  void serve(int worker) {
    insideRegion = true;
    uint64_t seen = 0;
    for (;;) {
      uint64_t current = generation.load(std::memory_order_acquire);
      auto spinUntil = std::chrono::steady_clock::now() + kSpinTime;
      for (int spins = 0; current == seen; ++spins) {
        MOE_CPU_RELAX();
        current = generation.load(std::memory_order_acquire);
        if ((spins & 63) == 63 && std::chrono::steady_clock::now() > spinUntil)
          break;
      }
      if (current == seen) {
        std::unique_lock<std::mutex> lock(mutex);
        ++sleepers;
        wake.wait(lock, [&] {
          return generation.load(std::memory_order_acquire) != seen;
        });
        --sleepers;
        current = generation.load(std::memory_order_acquire);
      }
      seen = current;
      if (stopping.load(std::memory_order_relaxed))
        return;
      work(worker);
      busyWorkers.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers;
  std::mutex regionMutex;

  // Wakes sleeping workers; `sleepers` is guarded by it, and `stopping` and
  // `generation` change only under it.
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<bool> stopping{false};
  int sleepers = 0;
  std::atomic<uint64_t> generation{0};

  // The region in progress, written before `generation` is bumped.
  detail::TaskFunction function = nullptr;
  const void *context = nullptr;
  int64_t taskCount = 0;
  std::atomic<int64_t> nextTask{0};
  std::atomic<int> busyWorkers{0};
};

// The pool in use, read without a lock on every kernel call (a CUDA
// emulation runs kernels on a hundred threads at once); replaced only by
// setNumThreads, between steps, under poolMutex.
std::mutex poolMutex;
std::unique_ptr<ThreadPool> ownedPool;
std::atomic<ThreadPool *> currentPool{nullptr};

/// The variables that set the kernels' threads when --threads does not.
constexpr const char *kThreadVariables[] = {"OPENBLAS_NUM_THREADS",
                                            "OMP_NUM_THREADS"};
constexpr long kMaxThreads = 4096;

/// The count in [1, kMaxThreads] that an environment variable holds up to
/// `stop` (a list's separator, or none): 0 when unset or empty, -1 when it
/// holds anything else.
int countFromEnvironment(const char *name, char stop = '\0') {
  const char *value = std::getenv(name);
  if (!value || *value == '\0')
    return 0;
  char *end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  bool whole = end != value && (*end == '\0' || (stop && *end == stop));
  return whole && parsed > 0 && parsed <= kMaxThreads ? static_cast<int>(parsed)
                                                      : -1;
}

/// The thread count a variable of kThreadVariables sets (OMP_NUM_THREADS
/// may list one count per nesting level; the first is the outer one).
int threadsFromVariable(const char *name) {
  return countFromEnvironment(
      name, std::string_view(name) == "OMP_NUM_THREADS" ? ',' : '\0');
}

/// The threads a process uses unless told: OPENBLAS_NUM_THREADS or
/// OMP_NUM_THREADS when set; else the cores it may run on, shared with the
/// other ranks the launcher put on the node when the cores are not already
/// divided among them (a binding launcher narrows each rank's affinity). So
/// four ranks on a 16-core node take 4 threads each, not 16 that spin
/// against each other. An invalid variable is skipped here; moe-run refuses
/// it first (threadVariableError).
int defaultThreads() {
  for (const char *name : kThreadVariables)
    if (int threads = threadsFromVariable(name); threads > 0)
      return threads;
  int machine = std::max(1u, std::thread::hardware_concurrency());
  int cores = machine;
#if defined(__linux__)
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
    cores = std::max(1, CPU_COUNT(&mask));
#endif
  if (cores < machine)
    return cores;
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"})
    if (int ranks = countFromEnvironment(name); ranks > 0)
      return std::max(1, cores / ranks);
  return cores;
}

/// The pool, made on first use with defaultThreads(); OpenBLAS runs on the
/// calling thread only.
ThreadPool &pool() {
  if (ThreadPool *current = currentPool.load(std::memory_order_acquire))
    return *current;
  std::lock_guard<std::mutex> lock(poolMutex);
  if (!ownedPool) {
    openblas_set_num_threads(1);
    ownedPool = std::make_unique<ThreadPool>(defaultThreads());
    currentPool.store(ownedPool.get(), std::memory_order_release);
  }
  return *ownedPool;
}
} // namespace

void setNumThreads(int threads) {
  std::lock_guard<std::mutex> lock(poolMutex);
  openblas_set_num_threads(1);
  currentPool.store(nullptr, std::memory_order_release);
  ownedPool.reset();
  ownedPool = std::make_unique<ThreadPool>(std::max(1, threads));
  currentPool.store(ownedPool.get(), std::memory_order_release);
}

int numThreads() { return pool().size(); }

std::string threadVariableError() {
  for (const char *name : kThreadVariables)
    if (threadsFromVariable(name) < 0)
      return std::string(name) + "='" + std::getenv(name) +
             "': expected a thread count in [1, " +
             std::to_string(kMaxThreads) + "] (or pass --threads)";
  return "";
}

int detail::availableThreads() { return insideRegion ? 1 : pool().size(); }

void detail::runTasks(int64_t tasks, TaskFunction fn, const void *context) {
  if (tasks <= 0)
    return;
  if (tasks > 1 && !insideRegion) {
    ThreadPool &threads = pool();
    if (threads.size() > 1 && threads.tryRun(tasks, fn, context))
      return;
  }
  for (int64_t task = 0; task < tasks; ++task)
    fn(context, task, 0);
}

detail::Share detail::shareOf(int64_t n, int64_t parts, int64_t part,
                              int64_t align) {
  int64_t units = (n + align - 1) / align;
  auto boundary = [&](int64_t p) {
    return std::min(n, units * p / parts * align);
  };
  return {boundary(part), part + 1 == parts ? n : boundary(part + 1)};
}

} // namespace moe::rt::cpu
