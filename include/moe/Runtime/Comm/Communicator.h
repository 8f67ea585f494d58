//===- Communicator.h - collectives over the groups of a mesh ---*- C++ -*-===//
//
// The multi-rank communication layer of the runtime. A World is the job's
// process group (MPI, or a single in-process rank for tests); World::group()
// cuts it into the groups of a Mesh over a subset of its axes (the tp group,
// the {dp, ep} group, ...); a Group runs nonblocking collectives on fp32,
// int32 and BF16 buffers and hands back a Request to wait on.
//
// Guarantees the executor relies on:
//  * Deterministic sums. allReduceSum and reduceScatterSum never use MPI's
//    reductions, whose order is unspecified and may change with message size,
//    process placement or library version. Element e of the result is always
//    ((x_0[e] + x_1[e]) + x_2[e]) + ... in group-rank order, computed by one
//    rank and copied to the others, so every rank of the group holds bitwise
//    identical values (replicas never drift apart) and a rerun reproduces the
//    bits exactly. See Group::startAllReduceSum for the algorithm. BF16
//    sums decode every value exactly to fp32, add in fp32 in that order and
//    round the total once to nearest even (see Bf16).
//  * No hang on a dead or diverged peer. Request::wait() polls with a
//    deadline (default 300 s, MOE_COMM_TIMEOUT_S overrides it) and returns
//    DeadlineExceeded naming the group, the collective and the time waited.
//  * Every MPI error is an absl::Status (communicators use MPI_ERRORS_RETURN
//    and messages come from MPI_Error_string), never an abort in the call.
//
// After any communication failure the World is "broken": MPI's state is then
// unknown (a peer may still write into a buffer), so further collectives are
// refused, and the World's destructor ends the whole job with MPI_Abort
// instead of MPI_Finalize, which would block on peers that never arrive.
//
// Collective calls must be made in the same order on every rank of a group,
// as in MPI. World::group() is collective over the whole world.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_COMM_COMMUNICATOR_H
#define MOE_RUNTIME_COMM_COMMUNICATOR_H

#include "moe/Runtime/Comm/Mesh.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt::comm {

namespace detail {
class WorldState;
struct GroupRecord;
struct RequestState;
class Transport;
} // namespace detail

/// The deadline of a wait when MOE_COMM_TIMEOUT_S is not set.
inline constexpr double kDefaultTimeoutSeconds = 300;

/// The deadline of a wait: MOE_COMM_TIMEOUT_S (seconds, a positive number)
/// if set, else kDefaultTimeoutSeconds.
absl::StatusOr<absl::Duration> timeoutFromEnvironment();

/// The offsets of `counts` packed one after another (an exclusive prefix
/// sum), the usual displacements of an all-to-all.
std::vector<int64_t> packedOffsets(absl::Span<const int64_t> counts);

/// A bfloat16 element (the top half of an fp32), as its bits: BF16 messages
/// travel at 2 bytes per element. Collectives that move data copy the bits
/// exactly; sums decode each rank's value exactly to fp32, add them in fp32
/// in group-rank order and round the total once to nearest even, which is
/// what summing the fp32 images of the values and rounding the result gives.
struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2, "BF16 messages are 2 bytes per element");

/// A started collective or point-to-point transfer. Its buffers must stay
/// alive and untouched until it completes, and it must complete before its
/// Group is destroyed. Move-only; destroying an unfinished Request waits for
/// it (with the deadline).
class Request {
public:
  /// A request that is already complete.
  Request();
  /// For the communication layer itself.
  explicit Request(std::unique_ptr<detail::RequestState> state);
  Request(Request &&other) noexcept;
  Request &operator=(Request &&other) noexcept;
  Request(const Request &) = delete;
  Request &operator=(const Request &) = delete;
  ~Request();

  /// Blocks until the transfer completes, at most the group's timeout
  /// (counted from this call). DeadlineExceeded names the group, the
  /// collective and the time waited, and what the other ranks said when
  /// asked (lib/Runtime/Comm/Probe.h): which did not answer, which wait in
  /// this collective and which are behind or in another one. Asking takes
  /// at most min(timeout, 2 s) more. Waiting again returns the same status.
  absl::Status wait();

  /// Makes progress without blocking: true once complete. Transfers move
  /// only while the process is inside the layer (MPI progresses inside MPI
  /// calls, and the later phases of a collective are started by this
  /// process), and every test() or wait() advances every request of the
  /// world. A caller that overlaps a long computation with a transfer
  /// should call test() now and then.
  absl::StatusOr<bool> test();

  bool done() const;

private:
  void finish();

  std::unique_ptr<detail::RequestState> state_;
};

/// The ranks of a World that differ only along some axes of a Mesh. Not
/// thread-safe: one thread issues a group's calls (see World::threadLevel).
/// Element types are float, int32_t and Bf16. Counts and offsets are in
/// elements; MPI limits each count and offset to 2^31 - 1.
class Group {
public:
  ~Group();
  Group(const Group &) = delete;
  Group &operator=(const Group &) = delete;

  /// This process's rank in the group, and the group's size.
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// "{dp,tp} of dp=2 x fsdp=1 x tp=2", for messages.
  const std::string &name() const { return name_; }
  /// The world rank of every group rank.
  const std::vector<int64_t> &worldRanks() const { return worldRanks_; }

  absl::Duration timeout() const { return timeout_; }
  void setTimeout(absl::Duration timeout) { timeout_ = timeout; }

  /// Sums `data` over the group in place. Algorithm (deterministic): the
  /// buffer is cut into size() near-equal chunks; an all-to-all sends chunk
  /// j of every rank to rank j; rank j adds the size() copies of its chunk
  /// in rank order 0..n-1 (starting from rank 0's values, so the result is
  /// exactly the serial fp32 sum of the replicas in rank order); then every
  /// rank sends its summed chunk to all others. It moves 2 (n-1)/n of the
  /// buffer per rank, like a ring, and needs one buffer of scratch. The
  /// second phase uses point-to-point messages tagged with the request's
  /// sequence number on a private communicator, so requests may complete in
  /// any order without the ranks disagreeing about which message is which.
  /// Why not a ring: it is deterministic too, but adds each chunk in a
  /// different rotation of the rank order and takes 2 (n-1) steps; the
  /// direct exchange takes two steps of n-1 messages each, and its result is
  /// the plain rank-order sum, which a single process can reproduce. (A
  /// hierarchical variant for very large groups can keep that result.)
  /// int32 sums wrap around (two's complement); BF16 chunks are added in
  /// fp32 and rounded once (see Bf16), and move as BF16 in both phases.
  absl::StatusOr<Request> startAllReduceSum(absl::Span<float> data);
  absl::StatusOr<Request> startAllReduceSum(absl::Span<int32_t> data);
  absl::StatusOr<Request> startAllReduceSum(absl::Span<Bf16> data);

  /// Every rank contributes input.size() elements; output (size() times as
  /// many) holds them in group-rank order on every rank. `input` may be this
  /// rank's slot of `output` (in place); other overlaps are errors.
  absl::StatusOr<Request> startAllGather(absl::Span<const float> input,
                                         absl::Span<float> output);
  absl::StatusOr<Request> startAllGather(absl::Span<const int32_t> input,
                                         absl::Span<int32_t> output);
  absl::StatusOr<Request> startAllGather(absl::Span<const Bf16> input,
                                         absl::Span<Bf16> output);

  /// Sums `input` (size() chunks of output.size() elements) over the group;
  /// rank r receives the sum of chunk r, added in rank order like
  /// allReduceSum. `input` and `output` must not overlap.
  absl::StatusOr<Request> startReduceScatterSum(absl::Span<const float> input,
                                                absl::Span<float> output);
  absl::StatusOr<Request> startReduceScatterSum(absl::Span<const int32_t> input,
                                                absl::Span<int32_t> output);
  absl::StatusOr<Request> startReduceScatterSum(absl::Span<const Bf16> input,
                                                absl::Span<Bf16> output);

  /// All-to-all with per-rank counts (MPI's all-to-all-v), for expert
  /// dispatch: sendCounts[j] elements at input[sendOffsets[j]] go to rank j,
  /// recvCounts[i] elements from rank i land at output[recvOffsets[i]].
  /// Counts must agree pairwise (rank i's sendCounts[j] == rank j's
  /// recvCounts[i]); exchangeCounts() tells each rank what it will receive.
  /// Receive regions must not overlap each other or the input.
  absl::StatusOr<Request> startAllToAll(absl::Span<const float> input,
                                        absl::Span<const int64_t> sendCounts,
                                        absl::Span<const int64_t> sendOffsets,
                                        absl::Span<float> output,
                                        absl::Span<const int64_t> recvCounts,
                                        absl::Span<const int64_t> recvOffsets);
  absl::StatusOr<Request> startAllToAll(absl::Span<const int32_t> input,
                                        absl::Span<const int64_t> sendCounts,
                                        absl::Span<const int64_t> sendOffsets,
                                        absl::Span<int32_t> output,
                                        absl::Span<const int64_t> recvCounts,
                                        absl::Span<const int64_t> recvOffsets);
  absl::StatusOr<Request> startAllToAll(absl::Span<const Bf16> input,
                                        absl::Span<const int64_t> sendCounts,
                                        absl::Span<const int64_t> sendOffsets,
                                        absl::Span<Bf16> output,
                                        absl::Span<const int64_t> recvCounts,
                                        absl::Span<const int64_t> recvOffsets);

  /// Tells every rank how much each rank will send it: recvCounts[i] =
  /// rank i's sendCounts[this rank] (an int32 all-to-all of one count per
  /// rank; counts must fit an int32).
  absl::StatusOr<Request>
  startExchangeCounts(absl::Span<const int64_t> sendCounts,
                      absl::Span<int64_t> recvCounts);

  /// Point-to-point, for pipeline stages: `peer` and the element count must
  /// match on both sides (a receive of a different size is an error); `tag`
  /// (0..32767) tells apart transfers between the same two ranks.
  absl::StatusOr<Request> startSend(absl::Span<const float> data, int peer,
                                    int tag = 0);
  absl::StatusOr<Request> startSend(absl::Span<const int32_t> data, int peer,
                                    int tag = 0);
  absl::StatusOr<Request> startSend(absl::Span<const Bf16> data, int peer,
                                    int tag = 0);
  absl::StatusOr<Request> startRecv(absl::Span<float> data, int peer,
                                    int tag = 0);
  absl::StatusOr<Request> startRecv(absl::Span<int32_t> data, int peer,
                                    int tag = 0);
  absl::StatusOr<Request> startRecv(absl::Span<Bf16> data, int peer,
                                    int tag = 0);

  /// Copies `data` of group rank `root` into `data` of every rank.
  absl::StatusOr<Request> startBroadcast(absl::Span<float> data, int root);
  absl::StatusOr<Request> startBroadcast(absl::Span<int32_t> data, int root);
  absl::StatusOr<Request> startBroadcast(absl::Span<Bf16> data, int root);

  absl::StatusOr<Request> startBarrier();

  // Blocking forms: start, then wait.
  absl::Status allReduceSum(absl::Span<float> data);
  absl::Status allReduceSum(absl::Span<int32_t> data);
  absl::Status allReduceSum(absl::Span<Bf16> data);
  absl::Status allGather(absl::Span<const float> input,
                         absl::Span<float> output);
  absl::Status allGather(absl::Span<const int32_t> input,
                         absl::Span<int32_t> output);
  absl::Status allGather(absl::Span<const Bf16> input,
                         absl::Span<Bf16> output);
  absl::Status reduceScatterSum(absl::Span<const float> input,
                                absl::Span<float> output);
  absl::Status reduceScatterSum(absl::Span<const int32_t> input,
                                absl::Span<int32_t> output);
  absl::Status reduceScatterSum(absl::Span<const Bf16> input,
                                absl::Span<Bf16> output);
  absl::Status allToAll(absl::Span<const float> input,
                        absl::Span<const int64_t> sendCounts,
                        absl::Span<const int64_t> sendOffsets,
                        absl::Span<float> output,
                        absl::Span<const int64_t> recvCounts,
                        absl::Span<const int64_t> recvOffsets);
  absl::Status allToAll(absl::Span<const int32_t> input,
                        absl::Span<const int64_t> sendCounts,
                        absl::Span<const int64_t> sendOffsets,
                        absl::Span<int32_t> output,
                        absl::Span<const int64_t> recvCounts,
                        absl::Span<const int64_t> recvOffsets);
  absl::Status allToAll(absl::Span<const Bf16> input,
                        absl::Span<const int64_t> sendCounts,
                        absl::Span<const int64_t> sendOffsets,
                        absl::Span<Bf16> output,
                        absl::Span<const int64_t> recvCounts,
                        absl::Span<const int64_t> recvOffsets);
  absl::StatusOr<std::vector<int64_t>>
  exchangeCounts(absl::Span<const int64_t> sendCounts);
  absl::Status send(absl::Span<const float> data, int peer, int tag = 0);
  absl::Status send(absl::Span<const int32_t> data, int peer, int tag = 0);
  absl::Status send(absl::Span<const Bf16> data, int peer, int tag = 0);
  absl::Status recv(absl::Span<float> data, int peer, int tag = 0);
  absl::Status recv(absl::Span<int32_t> data, int peer, int tag = 0);
  absl::Status recv(absl::Span<Bf16> data, int peer, int tag = 0);
  absl::Status broadcast(absl::Span<float> data, int root);
  absl::Status broadcast(absl::Span<int32_t> data, int root);
  absl::Status broadcast(absl::Span<Bf16> data, int root);
  absl::Status barrier();

private:
  friend class World;
  Group(std::unique_ptr<detail::Transport> transport, std::string name,
        std::vector<int64_t> worldRanks,
        std::shared_ptr<detail::WorldState> state, absl::Duration timeout);

  template <typename T>
  absl::StatusOr<Request> allReduceSumImpl(absl::Span<T> data);
  template <typename T>
  absl::StatusOr<Request> allGatherImpl(absl::Span<const T> input,
                                        absl::Span<T> output);
  template <typename T>
  absl::StatusOr<Request> reduceScatterSumImpl(absl::Span<const T> input,
                                               absl::Span<T> output);
  template <typename T>
  absl::StatusOr<Request>
  allToAllImpl(absl::Span<const T> input, absl::Span<const int64_t> sendCounts,
               absl::Span<const int64_t> sendOffsets, absl::Span<T> output,
               absl::Span<const int64_t> recvCounts,
               absl::Span<const int64_t> recvOffsets);
  template <typename T>
  absl::StatusOr<Request> sendImpl(absl::Span<const T> data, int peer, int tag);
  template <typename T>
  absl::StatusOr<Request> recvImpl(absl::Span<T> data, int peer, int tag);
  /// The checks and bookkeeping shared by send and recv; `start` posts the
  /// transfer.
  template <typename T, typename Start>
  absl::StatusOr<Request> pointToPoint(std::string what, size_t count,
                                       int peer, int tag, Start start);
  template <typename T>
  absl::StatusOr<Request> broadcastImpl(absl::Span<T> data, int root);

  /// Refuses new work once the world is broken.
  absl::Status checkHealthy(const std::string &collective) const;
  /// Numbers a collective of this group (the same on every rank, for the
  /// probes of a stuck wait): returns its sequence number.
  int64_t enter();
  /// A request running `collective`, with this group's name and deadline:
  /// collective number `sequence`, or (sequence -1) a transfer with group
  /// rank `peer`.
  std::unique_ptr<detail::RequestState>
  newRequest(std::string collective, int64_t sequence, int peer = -1) const;
  /// An error about this group's call `collective`.
  absl::Status error(absl::StatusCode code, const std::string &collective,
                     const std::string &message) const;

  std::unique_ptr<detail::Transport> transport_;
  std::string name_;
  std::vector<int64_t> worldRanks_;
  std::shared_ptr<detail::WorldState> state_;
  absl::Duration timeout_;
  int rank_ = 0;
  int size_ = 1;
  /// Numbers this group's allReduceSum calls, the same on every rank, so
  /// that their second-phase messages carry distinct tags.
  uint64_t allReduceSequence_ = 0;
  /// What the peers' probes learn about this group.
  std::shared_ptr<detail::GroupRecord> record_;
};

/// How far MPI lets threads call it (MPI_THREAD_*).
enum class ThreadLevel { Single, Funneled, Serialized, Multiple };

/// The processes of the job. One per process; it owns MPI's lifetime.
class World {
public:
  /// Initialises MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE; at
  /// least MPI_THREAD_FUNNELED is required, see threadLevel()). Works under
  /// mpirun and srun, and without a launcher as a singleton of size 1.
  static absl::StatusOr<std::unique_ptr<World>> init(int *argc, char ***argv);

  /// A world of one rank that never touches MPI, for tests and
  /// single-process runs.
  static absl::StatusOr<std::unique_ptr<World>> local();

  /// init() when a launcher (mpirun, srun, a PMI/PMIx server) started this
  /// process, else local(): a process started alone skips MPI entirely, so
  /// it needs no MPI runtime on its machine (a bare GPU node), costs no MPI
  /// start-up, and creates no Open MPI session directories that concurrent
  /// runs can trip over.
  static absl::StatusOr<std::unique_ptr<World>> start(int *argc, char ***argv);

  /// Whether a launcher started this process (start()).
  static bool startedByLauncher();

  /// Finalises MPI, or aborts the job if the world is broken (see the file
  /// comment).
  ~World();
  World(const World &) = delete;
  World &operator=(const World &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool usesMpi() const { return usesMpi_; }
  /// The MPI thread level granted. Below Multiple, only the thread that
  /// called init() may make communication calls.
  ThreadLevel threadLevel() const { return threadLevel_; }

  /// The deadline of every wait of groups created afterwards.
  absl::Duration timeout() const { return timeout_; }
  void setTimeout(absl::Duration timeout) { timeout_ = timeout; }

  /// The group of this rank over `axes` of `mesh` (a collective call of the
  /// whole world). `mesh` must have as many ranks as the world; the axes
  /// must be distinct axes of the mesh, and their order fixes the group's
  /// rank order (row-major, the last fastest). No axes: a group of one.
  absl::StatusOr<std::unique_ptr<Group>>
  group(const Mesh &mesh, const std::vector<std::string> &axes);

  /// False once a communication failed or timed out; failure() says why.
  bool healthy() const;
  std::string failure() const;

  /// Ends every process of the job with `exitCode` (MPI_Abort); for a local
  /// world, exits this process.
  [[noreturn]] void abort(int exitCode);

  /// Finalises MPI now (the destructor does it otherwise). Every Group must
  /// be destroyed first. Refused for a broken world.
  absl::Status finalize();

private:
  World() = default;

  bool usesMpi_ = false;
  bool finalized_ = false;
  int rank_ = 0;
  int size_ = 1;
  ThreadLevel threadLevel_ = ThreadLevel::Multiple;
  absl::Duration timeout_;
  std::shared_ptr<detail::WorldState> state_;
  /// All ranks in world order; group() uses it to check that every rank asks
  /// for the same group before it splits the world.
  std::unique_ptr<Group> everyone_;
};

} // namespace moe::rt::comm

#endif // MOE_RUNTIME_COMM_COMMUNICATOR_H
