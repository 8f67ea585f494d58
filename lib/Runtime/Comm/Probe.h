//===- Probe.h - asking the peers of a stuck wait what they do --*- C++ -*-===//
//
// MPI cannot say which rank a nonblocking collective waits for. So, as
// NCCL's flight recorder does, every rank keeps a count of the collectives
// it has entered on each group, and a wait that passes its deadline asks
// every other rank, on a communicator of its own, what it is doing: the
// count for the stuck group and the request it waits for. A rank answers
// from inside the layer (every test or wait, the communication thread of
// --async-collectives), so a rank that does not answer within a short grace
// period is hung, dead or busy outside it. The probes never touch the
// communicators that carry data, so they cannot change a result.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_COMM_PROBE_H
#define MOE_LIB_RUNTIME_COMM_PROBE_H

#include "absl/time/time.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe::rt::comm::detail {

class WorldState;

/// A rank's answer to a probe about one group.
struct PeerState {
  /// Collectives it has entered on the group; -1 if it has not created it.
  int64_t entered = -1;
  /// The request it waits for, if any: its group's id, its sequence number
  /// there (-1 for a point-to-point transfer), what it is and the group's
  /// name.
  bool waiting = false;
  int64_t waitGroup = -1;
  int64_t waitSequence = -1;
  std::string collective;
  std::string groupName;
};

/// The probe channel between the ranks of the world. Every call is made
/// with the world's progressMutex() held, and never blocks. So it runs on
/// whichever thread is inside the layer at the time; below
/// MPI_THREAD_MULTIPLE (World::threadLevel) that is the one thread allowed
/// to call MPI then, and the probes need no thread level of their own.
class Prober {
public:
  virtual ~Prober() = default;
  /// This rank and the world's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Answers the probes that have arrived, with `world`'s describe().
  virtual void serve(const WorldState &world) = 0;
  /// Asks every other rank about group `groupId`; returns the round the
  /// answers will carry.
  virtual uint64_t ask(int64_t groupId) = 0;
  /// Stores the answers of `round` that have arrived in answers[rank];
  /// answers of older rounds are dropped.
  virtual void collect(uint64_t round,
                       std::vector<std::optional<PeerState>> &answers) = 0;
};

/// How long a stuck wait gives its peers to answer: long enough for a rank
/// that shares its core with others, short next to any deadline worth
/// setting.
inline absl::Duration probeGrace(absl::Duration timeout) {
  return std::min(timeout, absl::Seconds(2));
}

/// What a stuck wait is, for describePeers().
struct StuckWait {
  int64_t groupId = 0;
  /// Its sequence number on the group; -1 for a point-to-point transfer,
  /// whose peer (a world rank) is then `peer`.
  int64_t sequence = -1;
  int64_t peer = -1;
  /// "allReduceSum of 16 f32", as in PeerState::collective.
  std::string collective;
  /// The group's members and this rank, as world ranks.
  std::vector<int64_t> members;
  int64_t self = 0;
};

/// What the answers say about the ranks a stuck wait depends on, e.g. "rank
/// 2 did not answer within 2.0 s (hung, dead or busy outside the
/// communication layer); ranks 1 and 3 are waiting in this collective".
/// `answers` is indexed by world rank (this rank's entry is ignored).
std::string describePeers(const StuckWait &wait,
                          const std::vector<std::optional<PeerState>> &answers,
                          absl::Duration grace);

/// "rank 3", "ranks 1 and 3", "ranks 0-3, 5 and 7" (sorted, distinct).
std::string formatRanks(const std::vector<int64_t> &ranks);

} // namespace moe::rt::comm::detail

#endif // MOE_LIB_RUNTIME_COMM_PROBE_H
