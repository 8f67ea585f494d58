//===- CollectiveWatch.cpp - deadlines for NCCL collectives ---------------===//
#include "CollectiveWatch.h"

#include "absl/strings/str_format.h"

namespace moe::rt::cuda {

CollectiveWatch::~CollectiveWatch() {
  for (Pending &p : pending)
    hooks.release(p.marker);
}

void CollectiveWatch::enqueued(std::string what, void *marker) {
  pending.push_back({std::move(what), marker, hooks.now()});
}

absl::Status CollectiveWatch::abort(absl::Status why) {
  if (!failure.ok())
    return failure;
  failure = std::move(why);
  hooks.abortAll();
  for (Pending &p : pending)
    hooks.release(p.marker);
  pending.clear();
  return failure;
}

absl::Status CollectiveWatch::check() {
  if (!failure.ok())
    return failure;
  // Markers are reached in order on each stream, not across streams: look
  // at all of them, not only the oldest.
  for (auto it = pending.begin(); it != pending.end();) {
    absl::StatusOr<bool> reached = hooks.reached(it->marker);
    if (!reached.ok())
      return abort(absl::Status(
          reached.status().code(),
          absl::StrFormat("%s: %s", it->what, reached.status().message())));
    if (*reached) {
      hooks.release(it->marker);
      it = pending.erase(it);
    } else {
      ++it;
    }
  }
  if (absl::Status error = hooks.asyncError(); !error.ok()) {
    std::string during =
        pending.empty() ? std::string("after the last collective completed")
                        : absl::StrFormat("during %s", pending.front().what);
    return abort(absl::Status(
        error.code(), absl::StrFormat("NCCL failed %s: %s; aborted the job's "
                                      "NCCL communicators",
                                      during, error.message())));
  }
  absl::Time now = hooks.now();
  for (const Pending &p : pending) {
    absl::Duration waited = now - p.since;
    if (waited >= timeout)
      return abort(absl::DeadlineExceededError(absl::StrFormat(
          "%s did not complete: waited %.1f s, the deadline "
          "(MOE_COMM_TIMEOUT_S) is %.1f s; a peer is dead or stuck; aborted "
          "the job's NCCL communicators",
          p.what, absl::ToDoubleSeconds(waited),
          absl::ToDoubleSeconds(timeout))));
  }
  return absl::OkStatus();
}

absl::Status
CollectiveWatch::waitUntil(const std::function<absl::StatusOr<bool>()> &done) {
  for (;;) {
    absl::StatusOr<bool> finished = done();
    if (!finished.ok())
      return finished.status();
    if (*finished)
      return check();
    if (absl::Status status = check(); !status.ok())
      return drainAfterAbort(done, status);
    hooks.pause();
  }
}

absl::Status CollectiveWatch::drainAfterAbort(
    const std::function<absl::StatusOr<bool>()> &done, absl::Status failed) {
  // The abort ends the collectives, and the work queued behind them runs
  // on: a copy into host memory that the caller frees when the wait fails
  // would write it later. So the wait goes on until `done` holds, but no
  // longer than another deadline (a stream that does not drain then is
  // stuck on something no abort ends).
  absl::Time since = hooks.now();
  for (;;) {
    absl::StatusOr<bool> finished = done();
    if (!finished.ok() || *finished)
      return failed;
    if (hooks.now() - since >= timeout)
      return absl::Status(
          failed.code(),
          absl::StrFormat("%s; the stream did not drain within %.1f s of "
                          "the abort",
                          failed.message(), absl::ToDoubleSeconds(timeout)));
    hooks.pause();
  }
}

} // namespace moe::rt::cuda
