//===- RequestState.h - the inside of a Request -----------------*- C++ -*-===//
//
// A Request is a chain of steps: the transfer already started, then steps
// run one after another as the previous transfer completes (a local sum, the
// next transfer). Only this process can run a step, so a chain advances
// only while the process is inside the layer: every test or wait of any
// request advances every request of the world that is in flight, as MPI's
// own progress engine does for its requests. Otherwise a rank that waits on
// one transfer would leave the later phases of another unstarted, and a peer
// that needs them would wait forever.
//
// WorldState is shared by a World, its Groups and their Requests: the
// requests in flight, and whether a failure has broken the world.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_COMM_REQUESTSTATE_H
#define MOE_LIB_RUNTIME_COMM_REQUESTSTATE_H

#include "Transport.h"

#include "absl/status/status.h"
#include "absl/time/time.h"

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe::rt::comm::detail {

struct RequestState;

class WorldState {
public:
  /// Records the first failure; later ones are consequences of it.
  void markBroken(const absl::Status &status);
  bool broken() const;
  std::string reason() const;

  /// Serialises all progress of the world's requests (a Group is used by
  /// one thread, but two threads may wait on requests of two groups).
  std::mutex &progressMutex() { return progressMutex_; }
  /// With progressMutex() held: adds a request in flight, drops one.
  void add(RequestState *state) { active_.push_back(state); }
  void remove(RequestState *state);
  /// With progressMutex() held: advances every request in flight, in the
  /// order they were started; finished ones leave the list.
  void progressAll();

private:
  mutable std::mutex healthMutex_;
  bool broken_ = false;
  std::string reason_;

  std::mutex progressMutex_;
  std::vector<RequestState *> active_;
};

/// Runs after the previous transfer completed; returns the next transfer to
/// wait for, or nullptr if the step did all its work locally.
using Step = std::function<absl::StatusOr<OperationPtr>()>;

struct RequestState {
  /// "allReduceSum of 1000 f32", for messages.
  std::string collective;
  /// The group's name, for messages.
  std::string group;
  int groupRank = 0;
  absl::Duration timeout;
  std::shared_ptr<WorldState> world;

  OperationPtr current;
  std::deque<Step> steps;
  /// Scratch buffers the transfers read or write until completion.
  std::vector<std::shared_ptr<void>> keepAlive;

  bool done = false;
  absl::Status status;
};

/// With the world's progressMutex() held: advances `state` as far as it
/// goes without blocking.
void progress(RequestState &state);

/// With the world's progressMutex() held: ends `state` with `status`, marks
/// the world broken and takes the request out of flight.
void fail(RequestState &state, absl::Status status);

} // namespace moe::rt::comm::detail

#endif // MOE_LIB_RUNTIME_COMM_REQUESTSTATE_H
