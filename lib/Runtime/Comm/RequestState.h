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
// requests in flight, and whether a failure has broken the world. It also
// keeps what a peer's probe asks about (see Probe.h): the collectives each
// group has entered and the request this rank is waiting for.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_COMM_REQUESTSTATE_H
#define MOE_LIB_RUNTIME_COMM_REQUESTSTATE_H

#include "Probe.h"
#include "Transport.h"

#include "absl/status/status.h"
#include "absl/time/time.h"

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe::rt::comm::detail {

struct RequestState;

/// A group as the probes see it. Groups are created in the same order on
/// every rank (World::group is a collective of the world), so the creation
/// index names the same group everywhere.
struct GroupRecord {
  int64_t id = 0;
  std::string name;
  std::vector<int64_t> worldRanks;
  /// Collectives this rank has started on the group; the sequence number of
  /// the next one. Written by the group's thread, read by probes.
  std::atomic<int64_t> entered{0};
};

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
  /// order they were started; finished ones leave the list. Answers the
  /// peers' probes too, since a rank answers only from inside the layer.
  void progressAll();

  /// The record of a new group, numbered in creation order.
  std::shared_ptr<GroupRecord> addGroup(std::string name,
                                        std::vector<int64_t> worldRanks);
  /// With progressMutex() held: `state` is being waited for, or no longer.
  void beginWait(const RequestState *state) { waits_.push_back(state); }
  void endWait(const RequestState *state);
  /// With progressMutex() held: this rank's answer to a probe about group
  /// `groupId`.
  PeerState describe(int64_t groupId) const;
  /// With progressMutex() held: the channel of the probes; none without MPI
  /// (or once MPI is finalised).
  Prober *prober() const { return prober_.get(); }
  void setProber(std::unique_ptr<Prober> prober) {
    prober_ = std::move(prober);
  }

private:
  mutable std::mutex healthMutex_;
  bool broken_ = false;
  std::string reason_;

  std::mutex progressMutex_;
  std::vector<RequestState *> active_;
  std::vector<const RequestState *> waits_;
  std::unique_ptr<Prober> prober_;

  mutable std::mutex groupsMutex_;
  std::vector<std::shared_ptr<GroupRecord>> groups_;
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
  /// The group's record; its sequence number for a collective (-1 for a
  /// point-to-point transfer), and for the latter the peer's world rank.
  std::shared_ptr<GroupRecord> record;
  int64_t sequence = -1;
  int64_t peer = -1;
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
