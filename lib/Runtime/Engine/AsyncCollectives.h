//===- AsyncCollectives.h - collectives off the critical path ---*- C++ -*-===//
//
// Private to the executor. With `moe-run --async-collectives`, a
// communication thread runs two kinds of collectives while the step goes on:
//   * reductions (all-reduce, reduce-scatter, a bucket of either) whose
//     results are read later than the next instruction, such as the
//     gradient reductions the optimizer reads: started where the program
//     has them, each result finished where it is first read;
//   * all-gathers of parameters (FSDP): the next one is started as soon as
//     the previous one finishes, one layer ahead of its use.
// The memory plan is made for blocking collectives, so an operation in
// flight works on private copies: its input is copied when it starts (the
// arena may reuse that memory right after) and its result is copied into
// the arena when it finishes (the plan keeps that range free from the
// collective's own position on). Before the step's own thread communicates
// over a group (a tensor-parallel collective, a loss over ranks), the
// operations in flight on that group complete (their results still wait for
// their positions); with MPI_THREAD_MULTIPLE those on other groups, each an
// MPI communicator of its own, go on meanwhile, as a GPU runs each kind of
// traffic on a stream of its own. Otherwise, and before an expert exchange
// (which has a thread of its own), everything in flight completes. Each
// group's collectives are then the same calls in the same order on every
// rank as in the blocking step, so the numbers are bitwise its numbers.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_ASYNCCOLLECTIVES_H
#define MOE_LIB_RUNTIME_ENGINE_ASYNCCOLLECTIVES_H

#include "Dispatch.h"

#include "absl/status/status.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace moe::rt::engine {

class AsyncCollectives {
public:
  /// What runs asynchronously in `program` (see the file comment); with
  /// `groupsAtOnce` (MPI_THREAD_MULTIPLE) the step's own collectives wait
  /// only for those in flight on their groups.
  AsyncCollectives(const Program &program, bool groupsAtOnce);
  ~AsyncCollectives();
  AsyncCollectives(const AsyncCollectives &) = delete;
  AsyncCollectives &operator=(const AsyncCollectives &) = delete;

  /// Runs instruction `index` of a step, the asynchronous way where it
  /// can: finishes what it reads, starts or finishes collectives, starts
  /// the next prefetch, and otherwise runs it in place.
  absl::Status run(const StepContext &context, size_t index);
  /// Finishes everything in flight (the end of a step, or an error).
  absl::Status drain(const StepContext &context);

private:
  struct Operation;
  absl::Status start(const StepContext &context, size_t index);
  absl::Status finish(const StepContext &context, uint32_t result);
  /// Waits until the communication thread has nothing to do.
  void waitIdle();
  /// Waits until nothing in flight communicates over one of `groups`.
  void waitIdleOn(const std::vector<int64_t> &groups);
  void serve();

  const Program &program;
  /// Reductions run asynchronously, and the parameter all-gathers in
  /// program order (prefetchNext[i]: the one to start after i's).
  std::vector<bool> deferred;
  std::vector<int64_t> prefetchNext;
  /// Operations in flight, by the buffers they produce.
  std::vector<std::shared_ptr<Operation>> inFlight;
  std::vector<bool> communicates; // instructions that call MPI themselves
  /// The groups each instruction communicates over (ops::groupsOf).
  std::vector<std::vector<int64_t>> groupsOf;
  bool groupsAtOnce;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::shared_ptr<Operation>> queue;
  bool stopping = false;
  std::thread worker;
};

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_ASYNCCOLLECTIVES_H
