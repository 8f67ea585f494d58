//===- CollectiveWatch.h - deadlines for NCCL collectives -------*- C++ -*-===//
//
// Private to the CUDA backend. NCCL runs a collective inside a kernel that
// spins until its peers take part: a dead or stuck peer leaves it spinning,
// and a host that then synchronises with the stream waits forever. The
// watch is moe-run's MPI deadline (MOE_COMM_TIMEOUT_S) for NCCL:
//   * each collective, once enqueued, leaves a completion marker (an event)
//     on its stream and is remembered, oldest first, with its name and group;
//   * every host wait of a step polls instead of blocking (waitUntil), and
//     each poll forgets the collectives whose markers have been reached;
//   * a communicator's asynchronous error (a peer's connection lost) or a
//     collective still incomplete past the deadline aborts every NCCL
//     communicator of the job (ncclCommAbort ends the spinning kernels), and
//     the wait returns an error naming the collective and its group, once
//     the stream it waits for has drained (what was queued behind the
//     collective, such as a copy into host memory, runs when the abort ends
//     it, and must not outlive the wait). The error stays: every later
//     check returns it.
// Checks happen only where the host waits anyway, so the watch adds no
// synchronisation to a step.
//
// The CUDA and NCCL calls are Hooks, so the logic runs in tests without a
// GPU (unittests/Cuda/CollectiveWatchTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_COLLECTIVEWATCH_H
#define MOE_LIB_RUNTIME_CUDA_COLLECTIVEWATCH_H

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include <deque>
#include <functional>
#include <string>

namespace moe::rt::cuda {

class CollectiveWatch {
public:
  struct Hooks {
    /// Whether a completion marker has been reached (cudaEventQuery).
    std::function<absl::StatusOr<bool>(void *marker)> reached;
    /// Hands a marker back once its collective is forgotten.
    std::function<void(void *marker)> release;
    /// The first asynchronous error of any communicator, OK if none
    /// (ncclCommGetAsyncError).
    std::function<absl::Status()> asyncError;
    /// Aborts every communicator of the job (ncclCommAbort).
    std::function<void()> abortAll;
    std::function<absl::Time()> now = [] { return absl::Now(); };
    /// Between two polls of a wait.
    std::function<void()> pause = [] {
      absl::SleepFor(absl::Microseconds(50));
    };
  };

  CollectiveWatch(Hooks hooks, absl::Duration timeout)
      : hooks(std::move(hooks)), timeout(timeout) {}
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch &) = delete;
  CollectiveWatch &operator=(const CollectiveWatch &) = delete;

  /// A collective described by `what` ("ncclAllReduce of 4096 float on
  /// group {dp} of dp=2 x tp=2 (world ranks 0, 2)") was enqueued; `marker`
  /// is reached when it completes. The watch owns the marker from here.
  void enqueued(std::string what, void *marker);
  /// Forgets the collectives that completed; an error, with every
  /// communicator aborted, if one failed or is past its deadline.
  absl::Status check();
  /// Polls `done` (a stream or event query) until it holds, checking the
  /// collectives between polls: a host wait that ends on a dead peer. A
  /// wait that fails still polls `done` (up to another deadline) until the
  /// aborted collectives, and the stream's work behind them, have ended:
  /// the caller may free what that work writes.
  absl::Status waitUntil(const std::function<absl::StatusOr<bool>()> &done);
  /// Fails every collective still remembered and aborts (an error of the
  /// caller's own, such as a failed NCCL call, ends the job's
  /// communicators too). Returns `why`, which later checks repeat.
  absl::Status abort(absl::Status why);
  /// The communicators were aborted: they must not be destroyed.
  bool aborted() const { return !failure.ok(); }
  absl::Duration deadline() const { return timeout; }

private:
  /// waitUntil after `failed`: polls `done` up to the deadline, then
  /// returns `failed` (saying when the stream did not drain).
  absl::Status
  drainAfterAbort(const std::function<absl::StatusOr<bool>()> &done,
                  absl::Status failed);

  struct Pending {
    std::string what;
    void *marker;
    absl::Time since;
  };
  Hooks hooks;
  absl::Duration timeout;
  std::deque<Pending> pending;
  absl::Status failure;
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_COLLECTIVEWATCH_H
