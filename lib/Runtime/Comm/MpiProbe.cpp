//===- MpiProbe.cpp - probes and answers between the ranks, over MPI ------===//
//
// A probe and its answer are small fixed-size messages on the prober's own
// communicator. Both sides only ever poll: MPI_Improbe and MPI_Mrecv for
// what arrived (safe with any thread that holds the world's progress lock),
// MPI_Isend for what goes out. A send to a rank that never receives it
// completes all the same for messages this small (eager delivery); one that
// has not completed when the prober goes away is left to MPI.
//
//===----------------------------------------------------------------------===//
#include "MpiSupport.h"
#include "RequestState.h"

#include <cstring>
#include <memory>

namespace moe::rt::comm::detail {

namespace {

constexpr int kProbeTag = 1;
constexpr int kAnswerTag = 2;

struct ProbeMessage {
  uint64_t round;
  int64_t group;
};

struct AnswerMessage {
  uint64_t round;
  int64_t entered;
  int64_t waiting;
  int64_t waitGroup;
  int64_t waitSequence;
  char collective[160];
  char groupName[160];
};

/// Copies `text` into `out`, cut to fit and terminated.
template <size_t N> void store(char (&out)[N], const std::string &text) {
  size_t length = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), length);
  out[length] = '\0';
}

template <size_t N> std::string load(const char (&in)[N]) {
  return std::string(in, strnlen(in, N));
}

/// A serve() between two polls of a busy loop costs nothing worth
/// measuring at this rate, and a probe is still answered at once next to
/// its grace period.
constexpr absl::Duration kServeInterval = absl::Milliseconds(1);

class MpiProber final : public Prober {
public:
  explicit MpiProber(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  ~MpiProber() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    // MPI finishes a freed send by itself; its buffer must outlive it.
    for (std::unique_ptr<Outgoing> &out : outgoing_) {
      MPI_Request_free(&out->request);
      out.release();
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void serve(const WorldState &world) override {
    absl::Time now = absl::Now();
    if (now < nextServe_)
      return;
    nextServe_ = now + kServeInterval;
    ProbeMessage probe;
    int source = 0;
    while (nextArrived(kProbeTag, probe, source)) {
      PeerState mine = world.describe(probe.group);
      auto out = std::make_unique<Outgoing>();
      AnswerMessage &answer = out->answer;
      answer.round = probe.round;
      answer.entered = mine.entered;
      answer.waiting = mine.waiting;
      answer.waitGroup = mine.waitGroup;
      answer.waitSequence = mine.waitSequence;
      store(answer.collective, mine.collective);
      store(answer.groupName, mine.groupName);
      send(std::move(out), &answer, sizeof answer, source, kAnswerTag);
    }
    reap();
  }

  uint64_t ask(int64_t groupId) override {
    ++round_;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_)
        continue;
      auto out = std::make_unique<Outgoing>();
      ProbeMessage &probe = out->probe;
      probe = {round_, groupId};
      send(std::move(out), &probe, sizeof probe, peer, kProbeTag);
    }
    return round_;
  }

  void collect(uint64_t round,
               std::vector<std::optional<PeerState>> &answers) override {
    AnswerMessage answer;
    int source = 0;
    while (nextArrived(kAnswerTag, answer, source)) {
      if (answer.round != round || source < 0 ||
          source >= static_cast<int>(answers.size()))
        continue;
      PeerState &peer = answers[source].emplace();
      peer.entered = answer.entered;
      peer.waiting = answer.waiting != 0;
      peer.waitGroup = answer.waitGroup;
      peer.waitSequence = answer.waitSequence;
      peer.collective = load(answer.collective);
      peer.groupName = load(answer.groupName);
    }
    reap();
  }

private:
  /// A message on its way and the buffer MPI reads it from.
  struct Outgoing {
    MPI_Request request = MPI_REQUEST_NULL;
    ProbeMessage probe;
    AnswerMessage answer;
  };

  /// Receives into `message` the next message with `tag` that has arrived
  /// (dropping any that cannot be read); false when none has.
  template <typename Message>
  bool nextArrived(int tag, Message &message, int &source) {
    for (;;) {
      int found = 0;
      MPI_Message handle;
      MPI_Status status;
      if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &found, &handle, &status) !=
              MPI_SUCCESS ||
          !found)
        return false;
      if (MPI_Mrecv(&message, sizeof message, MPI_BYTE, &handle, &status) ==
          MPI_SUCCESS) {
        source = status.MPI_SOURCE;
        return true;
      }
    }
  }

  /// Sends `bytes` at `data`, a part of `out`, which lives until the send
  /// completes.
  void send(std::unique_ptr<Outgoing> out, const void *data, size_t bytes,
            int peer, int tag) {
    if (MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_,
                  &out->request) == MPI_SUCCESS)
      outgoing_.push_back(std::move(out));
  }

  /// Drops the sends that have completed.
  void reap() {
    std::vector<std::unique_ptr<Outgoing>> pending;
    for (std::unique_ptr<Outgoing> &out : outgoing_) {
      int done = 0;
      if (MPI_Test(&out->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
          !done)
        pending.push_back(std::move(out));
    }
    outgoing_ = std::move(pending);
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  uint64_t round_ = 0;
  absl::Time nextServe_ = absl::InfinitePast();
  std::vector<std::unique_ptr<Outgoing>> outgoing_;
};

} // namespace

std::unique_ptr<Prober> makeMpiProber(MPI_Comm comm) {
  return std::make_unique<MpiProber>(comm);
}

} // namespace moe::rt::comm::detail
