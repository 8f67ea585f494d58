//===- Group.cpp - collectives of a group, checked and deterministic ------===//
//
// Each collective checks its arguments, then composes transfers of the
// group's Transport into a Request. The sums are done here, in a fixed rank
// order, never by MPI (see Communicator.h).
//
//===----------------------------------------------------------------------===//
#include "RequestState.h"
#include "RowSums.h"
#include "Transport.h"

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

namespace moe::rt::comm {

using detail::Channel;
using detail::OperationPtr;
using detail::sumRows;

namespace {

template <typename T> constexpr DType dtypeOf() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, Bf16>,
                "collectives run on float, int32_t and Bf16");
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else
    return DType::BF16;
}

/// "f32", "i32" or "bf16", for messages.
template <typename T> std::string typeName() {
  return dtypeName(dtypeOf<T>());
}

template <typename A, typename B>
bool overlaps(absl::Span<A> a, absl::Span<B> b) {
  if (a.empty() || b.empty())
    return false;
  auto aBegin = reinterpret_cast<uintptr_t>(a.data());
  auto bBegin = reinterpret_cast<uintptr_t>(b.data());
  return aBegin < bBegin + b.size() * sizeof(B) &&
         bBegin < aBegin + a.size() * sizeof(A);
}

/// Cuts `count` elements into n near-equal chunks (the first count % n one
/// element longer).
void chunk(int64_t count, int n, std::vector<int> &counts,
           std::vector<int> &offsets) {
  counts.assign(n, static_cast<int>(count / n));
  offsets.assign(n, 0);
  for (int j = 0; j < n; ++j) {
    if (j < count % n)
      ++counts[j];
    if (j > 0)
      offsets[j] = offsets[j - 1] + counts[j - 1];
  }
}

absl::Status run(absl::StatusOr<Request> request) {
  if (!request.ok())
    return request.status();
  return request->wait();
}

} // namespace

std::vector<int64_t> packedOffsets(absl::Span<const int64_t> counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i)
    offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

Group::Group(std::unique_ptr<detail::Transport> transport, std::string name,
             std::vector<int64_t> worldRanks,
             std::shared_ptr<detail::WorldState> state, absl::Duration timeout)
    : transport_(std::move(transport)), name_(std::move(name)),
      worldRanks_(std::move(worldRanks)), state_(std::move(state)),
      timeout_(timeout), rank_(transport_->rank()), size_(transport_->size()),
      record_(state_->addGroup(name_, worldRanks_)) {}

Group::~Group() = default;

absl::Status Group::error(absl::StatusCode code, const std::string &collective,
                          const std::string &message) const {
  return absl::Status(
      code, absl::StrCat(collective, " on group ", name_, ": ", message));
}

absl::Status Group::checkHealthy(const std::string &collective) const {
  if (!state_->broken())
    return absl::OkStatus();
  return error(absl::StatusCode::kFailedPrecondition, collective,
               absl::StrCat("the world can no longer communicate (",
                            state_->reason(), ")"));
}

int64_t Group::enter() { return record_->entered.fetch_add(1); }

std::unique_ptr<detail::RequestState>
Group::newRequest(std::string collective, int64_t sequence, int peer) const {
  auto state = std::make_unique<detail::RequestState>();
  state->collective = std::move(collective);
  state->group = name_;
  state->groupRank = rank_;
  state->record = record_;
  state->sequence = sequence;
  state->peer = peer >= 0 ? worldRanks_[peer] : -1;
  state->timeout = timeout_;
  state->world = state_;
  return state;
}

/// Checks that `value` (a count or an offset) fits MPI's int.
static absl::Status checkInt(int64_t value, const char *what) {
  if (value < 0 || value > INT_MAX)
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", value, " is outside MPI's count range [0, ", INT_MAX, "]"));
  return absl::OkStatus();
}

/// Makes `started` the request's current transfer. A failure to start
/// means the ranks may now disagree about what runs, so it breaks the world
/// like a failed transfer.
static absl::Status begin(detail::RequestState &state,
                          absl::StatusOr<OperationPtr> started) {
  if (!started.ok()) {
    absl::Status failed(started.status().code(),
                        absl::StrCat(state.collective, " on group ",
                                     state.group, ": ",
                                     started.status().message()));
    state.world->markBroken(failed);
    return failed;
  }
  state.current = std::move(*started);
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<Request> Group::allReduceSumImpl(absl::Span<T> data) {
  std::string what =
      absl::StrCat("allReduceSum of ", data.size(), " ", typeName<T>());
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  if (static_cast<int64_t>(data.size()) > INT_MAX - size_)
    return error(absl::StatusCode::kInvalidArgument, what,
                 "too many elements for MPI's int counts");
  // Numbered on every rank, including calls that move nothing, so that the
  // numbers agree across the group.
  uint64_t sequence = allReduceSequence_++;
  int64_t entered = enter();
  if (size_ == 1 || data.empty())
    return Request();

  int n = size_;
  std::vector<int> counts, offsets;
  chunk(static_cast<int64_t>(data.size()), n, counts, offsets);
  int mine = counts[rank_];
  auto scratch =
      std::make_shared<std::vector<T>>(static_cast<size_t>(n) * mine);
  std::vector<int> recvCounts(n, mine), recvOffsets(n);
  for (int i = 0; i < n; ++i)
    recvOffsets[i] = i * mine;

  auto state = newRequest(std::move(what), entered);
  state->keepAlive.push_back(scratch);
  // Phase 1: chunk j of every rank goes to rank j.
  if (absl::Status started =
          begin(*state, transport_->allToAllV(dtypeOf<T>(), data.data(), counts,
                                              offsets, scratch->data(),
                                              recvCounts, recvOffsets));
      !started.ok())
    return started;
  // Phase 2: rank j adds its chunk's copies in rank order.
  T *base = data.data();
  int rank = rank_;
  state->steps.push_back([=]() -> absl::StatusOr<OperationPtr> {
    sumRows(base + offsets[rank], scratch->data(), n, mine);
    return OperationPtr();
  });
  // Phase 3: every summed chunk goes to every rank. Point-to-point with a
  // per-call tag on the internal channel: this phase starts whenever a rank
  // happens to poll, so a collective here could be issued in different
  // orders on different ranks when several requests are in flight.
  int tag = static_cast<int>(sequence %
                             (static_cast<uint64_t>(transport_->maxTag()) + 1));
  detail::Transport *transport = transport_.get();
  state->steps.push_back([=]() -> absl::StatusOr<OperationPtr> {
    std::vector<OperationPtr> transfers;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank)
        continue;
      if (mine > 0) {
        absl::StatusOr<OperationPtr> sent =
            transport->send(Channel::Internal, dtypeOf<T>(),
                            base + offsets[rank], mine, peer, tag);
        if (!sent.ok())
          return sent.status();
        transfers.push_back(std::move(*sent));
      }
      if (counts[peer] > 0) {
        absl::StatusOr<OperationPtr> received =
            transport->recv(Channel::Internal, dtypeOf<T>(),
                            base + offsets[peer], counts[peer], peer, tag);
        if (!received.ok())
          return received.status();
        transfers.push_back(std::move(*received));
      }
    }
    return detail::allOf(std::move(transfers));
  });
  return Request(std::move(state));
}

template <typename T>
absl::StatusOr<Request> Group::allGatherImpl(absl::Span<const T> input,
                                             absl::Span<T> output) {
  std::string what =
      absl::StrCat("allGather of ", input.size(), " ", typeName<T>());
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  int64_t count = static_cast<int64_t>(input.size());
  if (static_cast<int64_t>(output.size()) != count * size_)
    return error(absl::StatusCode::kInvalidArgument, what,
                 absl::StrCat("the output has ", output.size(),
                              " elements, expected ", size_, " x ", count));
  if (absl::Status status = checkInt(count * size_, "the output size");
      !status.ok())
    return error(status.code(), what, std::string(status.message()));
  bool inPlace = count > 0 && input.data() == output.data() + rank_ * count;
  if (!inPlace && overlaps(input, output))
    return error(absl::StatusCode::kInvalidArgument, what,
                 "the input overlaps the output other than at this rank's "
                 "slot");
  int64_t entered = enter();
  if (count == 0)
    return Request();
  std::vector<int> counts(size_, static_cast<int>(count)), offsets(size_);
  for (int j = 0; j < size_; ++j)
    offsets[j] = j * static_cast<int>(count);
  auto state = newRequest(std::move(what), entered);
  if (absl::Status started = begin(
          *state,
          transport_->allGatherV(dtypeOf<T>(), inPlace ? nullptr : input.data(),
                                 static_cast<int>(count), output.data(),
                                 std::move(counts), std::move(offsets)));
      !started.ok())
    return started;
  return Request(std::move(state));
}

template <typename T>
absl::StatusOr<Request> Group::reduceScatterSumImpl(absl::Span<const T> input,
                                                    absl::Span<T> output) {
  std::string what =
      absl::StrCat("reduceScatterSum of ", input.size(), " ", typeName<T>());
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  int64_t count = static_cast<int64_t>(output.size());
  if (static_cast<int64_t>(input.size()) != count * size_)
    return error(absl::StatusCode::kInvalidArgument, what,
                 absl::StrCat("the input has ", input.size(),
                              " elements, expected ", size_, " x ", count,
                              " (the group size times the output size)"));
  if (absl::Status status = checkInt(count * size_, "the input size");
      !status.ok())
    return error(status.code(), what, std::string(status.message()));
  if (overlaps(input, output))
    return error(absl::StatusCode::kInvalidArgument, what,
                 "the input and the output overlap");
  int64_t entered = enter();
  if (count == 0)
    return Request();
  if (size_ == 1) {
    std::memcpy(output.data(), input.data(), count * sizeof(T));
    return Request();
  }

  int n = size_;
  auto scratch =
      std::make_shared<std::vector<T>>(static_cast<size_t>(n) * count);
  std::vector<int> counts(n, static_cast<int>(count)), offsets(n);
  for (int j = 0; j < n; ++j)
    offsets[j] = j * static_cast<int>(count);
  auto state = newRequest(std::move(what), entered);
  state->keepAlive.push_back(scratch);
  // Chunk j of every rank goes to rank j, which adds them in rank order.
  if (absl::Status started =
          begin(*state, transport_->allToAllV(dtypeOf<T>(), input.data(),
                                              counts, offsets, scratch->data(),
                                              counts, offsets));
      !started.ok())
    return started;
  T *out = output.data();
  state->steps.push_back([=]() -> absl::StatusOr<OperationPtr> {
    sumRows(out, scratch->data(), n, static_cast<size_t>(count));
    return OperationPtr();
  });
  return Request(std::move(state));
}

template <typename T>
absl::StatusOr<Request>
Group::allToAllImpl(absl::Span<const T> input,
                    absl::Span<const int64_t> sendCounts,
                    absl::Span<const int64_t> sendOffsets, absl::Span<T> output,
                    absl::Span<const int64_t> recvCounts,
                    absl::Span<const int64_t> recvOffsets) {
  std::string what = absl::StrCat("allToAll of ", typeName<T>());
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  auto invalid = [&](const std::string &message) {
    return error(absl::StatusCode::kInvalidArgument, what, message);
  };
  struct Side {
    const char *name;
    absl::Span<const int64_t> counts, offsets;
    size_t bufferSize;
  };
  for (const Side &side :
       {Side{"send", sendCounts, sendOffsets, input.size()},
        Side{"receive", recvCounts, recvOffsets, output.size()}}) {
    if (side.counts.size() != static_cast<size_t>(size_) ||
        side.offsets.size() != static_cast<size_t>(size_))
      return invalid(absl::StrCat(side.name, " counts and offsets need ", size_,
                                  " entries (one per rank), got ",
                                  side.counts.size(), " and ",
                                  side.offsets.size()));
    for (int j = 0; j < size_; ++j) {
      int64_t c = side.counts[j], o = side.offsets[j];
      if (c < 0 || o < 0 || c > INT_MAX || o > INT_MAX)
        return invalid(absl::StrCat(side.name, " count ", c, " or offset ", o,
                                    " for rank ", j, " is outside [0, ",
                                    INT_MAX, "]"));
      if (static_cast<uint64_t>(o + c) > side.bufferSize)
        return invalid(absl::StrCat(side.name, " region [", o, ", ", o + c,
                                    ") for rank ", j, " is outside the ",
                                    side.bufferSize, "-element buffer"));
    }
  }
  if (overlaps(input, output))
    return invalid("the input and the output overlap");
  // The one pair of counts a rank can check alone: what it sends itself.
  if (sendCounts[rank_] != recvCounts[rank_])
    return invalid(absl::StrCat("this rank sends ", sendCounts[rank_],
                                " elements to itself but expects to receive ",
                                recvCounts[rank_]));
  // Two ranks writing one element would make the result depend on timing.
  std::vector<std::pair<int64_t, int64_t>> regions;
  for (int i = 0; i < size_; ++i)
    if (recvCounts[i] > 0)
      regions.push_back({recvOffsets[i], recvOffsets[i] + recvCounts[i]});
  std::sort(regions.begin(), regions.end());
  for (size_t i = 1; i < regions.size(); ++i)
    if (regions[i].first < regions[i - 1].second)
      return invalid(absl::StrCat("receive regions [", regions[i - 1].first,
                                  ", ", regions[i - 1].second, ") and [",
                                  regions[i].first, ", ", regions[i].second,
                                  ") overlap"));

  auto toInt = [](absl::Span<const int64_t> values) {
    return std::vector<int>(values.begin(), values.end());
  };
  auto state = newRequest(std::move(what), enter());
  if (absl::Status started = begin(
          *state,
          transport_->allToAllV(dtypeOf<T>(), input.data(), toInt(sendCounts),
                                toInt(sendOffsets), output.data(),
                                toInt(recvCounts), toInt(recvOffsets)));
      !started.ok())
    return started;
  return Request(std::move(state));
}

absl::StatusOr<Request>
Group::startExchangeCounts(absl::Span<const int64_t> sendCounts,
                           absl::Span<int64_t> recvCounts) {
  std::string what = "exchangeCounts";
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  if (sendCounts.size() != static_cast<size_t>(size_) ||
      recvCounts.size() != static_cast<size_t>(size_))
    return error(absl::StatusCode::kInvalidArgument, what,
                 absl::StrCat("need ", size_, " send and receive counts, got ",
                              sendCounts.size(), " and ", recvCounts.size()));
  auto send = std::make_shared<std::vector<int32_t>>(size_);
  auto received = std::make_shared<std::vector<int32_t>>(size_);
  for (int j = 0; j < size_; ++j) {
    if (sendCounts[j] < 0 || sendCounts[j] > INT32_MAX)
      return error(absl::StatusCode::kInvalidArgument, what,
                   absl::StrCat("count ", sendCounts[j], " for rank ", j,
                                " is outside [0, ", INT32_MAX, "]"));
    (*send)[j] = static_cast<int32_t>(sendCounts[j]);
  }
  std::vector<int> ones(size_, 1), offsets(size_);
  for (int j = 0; j < size_; ++j)
    offsets[j] = j;
  auto state = newRequest(std::move(what), enter());
  state->keepAlive.push_back(send);
  state->keepAlive.push_back(received);
  if (absl::Status started = begin(
          *state, transport_->allToAllV(DType::I32, send->data(), ones, offsets,
                                        received->data(), ones, offsets));
      !started.ok())
    return started;
  int64_t *out = recvCounts.data();
  state->steps.push_back([=]() -> absl::StatusOr<OperationPtr> {
    std::copy(received->begin(), received->end(), out);
    return OperationPtr();
  });
  return Request(std::move(state));
}

/// Checks a point-to-point peer and tag.
static absl::Status checkPeer(int peer, int size, int tag, int maxTag) {
  if (peer < 0 || peer >= size)
    return absl::InvalidArgumentError(absl::StrCat(
        "peer ", peer, " is not a rank of the group [0, ", size, ")"));
  int tagLimit = std::min(32767, maxTag);
  if (tag < 0 || tag > tagLimit)
    return absl::InvalidArgumentError(
        absl::StrCat("tag ", tag, " is outside [0, ", tagLimit, "]"));
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<Request> Group::sendImpl(absl::Span<const T> data, int peer,
                                        int tag) {
  return pointToPoint<T>(
      absl::StrCat("send of ", data.size(), " ", typeName<T>(),
                   " to group rank ", peer),
      data.size(), peer, tag, [&] {
        return transport_->send(Channel::User, dtypeOf<T>(), data.data(),
                                static_cast<int>(data.size()), peer, tag);
      });
}

template <typename T>
absl::StatusOr<Request> Group::recvImpl(absl::Span<T> data, int peer, int tag) {
  return pointToPoint<T>(
      absl::StrCat("recv of ", data.size(), " ", typeName<T>(),
                   " from group rank ", peer),
      data.size(), peer, tag, [&] {
        return transport_->recv(Channel::User, dtypeOf<T>(), data.data(),
                                static_cast<int>(data.size()), peer, tag);
      });
}

template <typename T, typename Start>
absl::StatusOr<Request> Group::pointToPoint(std::string what, size_t count,
                                            int peer, int tag, Start start) {
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  absl::Status status = checkPeer(peer, size_, tag, transport_->maxTag());
  if (status.ok())
    status = checkInt(static_cast<int64_t>(count), "count");
  if (!status.ok())
    return error(status.code(), what, std::string(status.message()));
  auto state = newRequest(std::move(what), -1, peer);
  if (absl::Status started = begin(*state, start()); !started.ok())
    return started;
  return Request(std::move(state));
}

template <typename T>
absl::StatusOr<Request> Group::broadcastImpl(absl::Span<T> data, int root) {
  std::string what = absl::StrCat("broadcast of ", data.size(), " ",
                                  typeName<T>(), " from group rank ", root);
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  if (root < 0 || root >= size_)
    return error(absl::StatusCode::kInvalidArgument, what,
                 absl::StrCat("root ", root, " is not a rank of the group [0, ",
                              size_, ")"));
  if (absl::Status status =
          checkInt(static_cast<int64_t>(data.size()), "count");
      !status.ok())
    return error(status.code(), what, std::string(status.message()));
  auto state = newRequest(std::move(what), enter());
  if (absl::Status started = begin(
          *state, transport_->broadcast(dtypeOf<T>(), data.data(),
                                        static_cast<int>(data.size()), root));
      !started.ok())
    return started;
  return Request(std::move(state));
}

absl::StatusOr<Request> Group::startBarrier() {
  std::string what = "barrier";
  if (absl::Status status = checkHealthy(what); !status.ok())
    return status;
  auto state = newRequest(std::move(what), enter());
  if (absl::Status started = begin(*state, transport_->barrier());
      !started.ok())
    return started;
  return Request(std::move(state));
}

// The typed entry points: one overload per element type, so that vectors
// and arrays convert to spans implicitly, and their blocking forms (start,
// then wait). The same for every type, hence one definition.
#define MOE_COMM_GROUP_ENTRY_POINTS(T)                                        \
  absl::StatusOr<Request> Group::startAllReduceSum(absl::Span<T> data) {      \
    return allReduceSumImpl(data);                                            \
  }                                                                           \
  absl::StatusOr<Request> Group::startAllGather(absl::Span<const T> input,    \
                                                absl::Span<T> output) {       \
    return allGatherImpl(input, output);                                      \
  }                                                                           \
  absl::StatusOr<Request> Group::startReduceScatterSum(                       \
      absl::Span<const T> input, absl::Span<T> output) {                      \
    return reduceScatterSumImpl(input, output);                               \
  }                                                                           \
  absl::StatusOr<Request> Group::startAllToAll(                               \
      absl::Span<const T> input, absl::Span<const int64_t> sendCounts,        \
      absl::Span<const int64_t> sendOffsets, absl::Span<T> output,            \
      absl::Span<const int64_t> recvCounts,                                   \
      absl::Span<const int64_t> recvOffsets) {                                \
    return allToAllImpl(input, sendCounts, sendOffsets, output, recvCounts,   \
                        recvOffsets);                                         \
  }                                                                           \
  absl::StatusOr<Request> Group::startSend(absl::Span<const T> data,          \
                                           int peer, int tag) {               \
    return sendImpl(data, peer, tag);                                         \
  }                                                                           \
  absl::StatusOr<Request> Group::startRecv(absl::Span<T> data, int peer,      \
                                           int tag) {                         \
    return recvImpl(data, peer, tag);                                         \
  }                                                                           \
  absl::StatusOr<Request> Group::startBroadcast(absl::Span<T> data,           \
                                                int root) {                   \
    return broadcastImpl(data, root);                                         \
  }                                                                           \
  absl::Status Group::allReduceSum(absl::Span<T> data) {                      \
    return run(startAllReduceSum(data));                                      \
  }                                                                           \
  absl::Status Group::allGather(absl::Span<const T> input,                    \
                                absl::Span<T> output) {                       \
    return run(startAllGather(input, output));                                \
  }                                                                           \
  absl::Status Group::reduceScatterSum(absl::Span<const T> input,             \
                                       absl::Span<T> output) {                \
    return run(startReduceScatterSum(input, output));                         \
  }                                                                           \
  absl::Status Group::allToAll(                                               \
      absl::Span<const T> input, absl::Span<const int64_t> sendCounts,        \
      absl::Span<const int64_t> sendOffsets, absl::Span<T> output,            \
      absl::Span<const int64_t> recvCounts,                                   \
      absl::Span<const int64_t> recvOffsets) {                                \
    return run(startAllToAll(input, sendCounts, sendOffsets, output,          \
                             recvCounts, recvOffsets));                       \
  }                                                                           \
  absl::Status Group::send(absl::Span<const T> data, int peer, int tag) {     \
    return run(startSend(data, peer, tag));                                   \
  }                                                                           \
  absl::Status Group::recv(absl::Span<T> data, int peer, int tag) {           \
    return run(startRecv(data, peer, tag));                                   \
  }                                                                           \
  absl::Status Group::broadcast(absl::Span<T> data, int root) {               \
    return run(startBroadcast(data, root));                                   \
  }

MOE_COMM_GROUP_ENTRY_POINTS(float)
MOE_COMM_GROUP_ENTRY_POINTS(int32_t)
MOE_COMM_GROUP_ENTRY_POINTS(Bf16)
#undef MOE_COMM_GROUP_ENTRY_POINTS

absl::StatusOr<std::vector<int64_t>>
Group::exchangeCounts(absl::Span<const int64_t> sendCounts) {
  std::vector<int64_t> recvCounts(size_);
  if (absl::Status status =
          run(startExchangeCounts(sendCounts, absl::MakeSpan(recvCounts)));
      !status.ok())
    return status;
  return recvCounts;
}
absl::Status Group::barrier() { return run(startBarrier()); }

} // namespace moe::rt::comm
