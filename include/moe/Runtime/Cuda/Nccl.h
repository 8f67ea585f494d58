//===- Nccl.h - NCCL communicators over the mesh's groups -------*- C++ -*-===//
//
// The GPU side of lib/Runtime/Comm: one NCCL communicator over the whole job,
// bootstrapped over MPI (rank 0's unique id reaches every rank through the
// MPI world), and one per group of the mesh split from it (ncclCommSplit:
// the ranks of a group share a colour, its first world rank, and keep their
// group order). Collectives are enqueued on a caller's stream; NCCL orders
// them with the kernels of that stream, and events order them with others.
//
// The communicators are non-blocking (ncclConfig_t::blocking = 0): no NCCL
// call waits for a peer. Creation and each call that answers ncclInProgress
// are polled against the job's deadline (MOE_COMM_TIMEOUT_S, the MPI
// group's), and every collective is handed to the world's CollectiveWatch
// (lib/Runtime/Cuda/CollectiveWatch.h), which host waits poll: a dead or
// stuck peer aborts every communicator and ends the wait with an error
// naming the collective and its group, never a hang.
//
// Without a GPU, creation fails naming NCCL's reason; nothing hangs.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_NCCL_H
#define MOE_RUNTIME_CUDA_NCCL_H

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt::cuda {

class CollectiveWatch;
class EventPool;
class NcclWorld;

/// A NCCL communicator over the ranks of one group, in its rank order.
class NcclGroup {
public:
  ~NcclGroup();
  NcclGroup(const NcclGroup &) = delete;
  NcclGroup &operator=(const NcclGroup &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The communicator of the same ranks for the gradient reductions that
  /// run on a stream of their own (CommStream's reductions lane): each
  /// communicator is used from one stream only, in program order. This one
  /// when the group has none.
  NcclGroup &forReductions() { return reductionLane ? *reductionLane : *this; }

  /// data = the sum of every rank's data (in place).
  absl::Status allReduceSum(float *data, int64_t count, cudaStream_t stream);
  /// The same for BF16 (bits), as the CPU sums: the ranks' blocks gathered
  /// (ncclBfloat16), added in fp32 in rank order and rounded once
  /// (sumBf16Rows), not NCCL's ring, which rounds after every hop.
  absl::Status allReduceSum(uint16_t *bf16, int64_t count,
                            cudaStream_t stream);
  /// values = their sum over the ranks in group-rank order, as
  /// comm::sumOverGroup adds the CPU's doubles and counts: every rank's
  /// values gathered as bits, then added in rank order (sumRowsInRankOrder),
  /// bitwise the CPU's sum and the same on every rank.
  absl::Status sumInRankOrder(double *values, int64_t count,
                              cudaStream_t stream);
  absl::Status sumInRankOrder(unsigned long long *values, int64_t count,
                              cudaStream_t stream);
  /// data = the elementwise maximum of every rank's data (in place).
  absl::Status allReduceMax(float *data, int64_t count, cudaStream_t stream);
  /// output = the ranks' inputs (`count` each) concatenated in rank order.
  absl::Status allGather(const float *input, float *output, int64_t count,
                         cudaStream_t stream);
  /// The same for any element type, as bytes (token ids travel so).
  absl::Status allGatherBytes(const void *input, void *output, int64_t bytes,
                              cudaStream_t stream);
  /// output = this rank's block (`count` elements) of the sum of the
  /// ranks' inputs (size() * count each).
  absl::Status reduceScatterSum(const float *input, float *output,
                                int64_t count, cudaStream_t stream);
  /// The same for BF16 (bits): block r of every rank sent to rank r
  /// (ncclBfloat16), then summed as allReduceSum's.
  absl::Status reduceScatterSum(const uint16_t *input, uint16_t *output,
                                int64_t count, cudaStream_t stream);
  /// Rows of `width` floats to every rank: sendRows[r] of them, in rank
  /// order from `input`, to rank r; recvRows[r] from rank r into `output`,
  /// in rank order (the expert all-to-all, its counts known on the host).
  absl::Status allToAllRows(const float *input,
                            const std::vector<int64_t> &sendRows,
                            float *output, const std::vector<int64_t> &recvRows,
                            int64_t width, cudaStream_t stream);
  /// The same for rows of BF16 (bits): mixed precision's expert dispatch.
  absl::Status allToAllRows(const uint16_t *input,
                            const std::vector<int64_t> &sendRows,
                            uint16_t *output,
                            const std::vector<int64_t> &recvRows,
                            int64_t width, cudaStream_t stream);
  /// The same for rows of 32-bit words: FP8 dispatch's packed rows.
  absl::Status allToAllRows(const int32_t *input,
                            const std::vector<int64_t> &sendRows,
                            int32_t *output,
                            const std::vector<int64_t> &recvRows, int64_t width,
                            cudaStream_t stream);

private:
  friend class NcclWorld;
  template <typename T>
  absl::Status sumInRankOrderOf(T *values, int64_t count, cudaStream_t stream);
  /// allToAllRows over elements of `type` (`elementBytes` each).
  absl::Status allToAllRowsOf(const void *input,
                              const std::vector<int64_t> &sendRows,
                              void *output,
                              const std::vector<int64_t> &recvRows,
                              int64_t width, ncclDataType_t type,
                              size_t elementBytes, cudaStream_t stream);
  NcclGroup(ncclComm_t comm, int rank, int size, NcclWorld *world,
            std::string label)
      : comm(comm), rank_(rank), size_(size), world(world),
        label(std::move(label)) {}
  /// The end of one NCCL call (or group) named `call` that moves `what`:
  /// its result settled (polled while ncclInProgress), then a completion
  /// marker on `stream` handed to the watch. A failure aborts the job's
  /// communicators.
  absl::Status issued(ncclResult_t result, const char *call,
                      const std::string &what, cudaStream_t stream);

  ncclComm_t comm;
  int rank_, size_;
  NcclWorld *world;
  std::unique_ptr<NcclGroup> reductionLane;
  /// "{dp} of dp=2 x tp=2 (world ranks 0, 2)", for messages.
  std::string label;
};

/// The job's NCCL communicator, from which the groups' are split.
class NcclWorld {
public:
  /// A collective call of every rank of `everyone` (the MPI group of the
  /// whole job): binds this process to GPU `device`, shares rank 0's unique
  /// id over MPI and creates the communicator.
  static absl::StatusOr<std::unique_ptr<NcclWorld>>
  create(comm::Group &everyone, int device);
  ~NcclWorld();
  NcclWorld(const NcclWorld &) = delete;
  NcclWorld &operator=(const NcclWorld &) = delete;

  /// The communicator of `group`, an MPI group of the same job, and with
  /// `reductionLane` a second one of the same ranks (forReductions). A
  /// collective call of every rank of the job (each passing its own group
  /// of the same axes and the same `reductionLane`).
  absl::StatusOr<std::unique_ptr<NcclGroup>> split(const comm::Group &group,
                                                   bool reductionLane = false);

  /// The deadlines of every collective of the job's communicators. Host
  /// waits poll it (CollectiveWatch::waitUntil).
  CollectiveWatch &watch() { return *watch_; }

private:
  friend class NcclGroup;
  NcclWorld(ncclComm_t comm, int rank, absl::Duration timeout);
  /// One communicator of `group`'s ranks, split from the job's.
  absl::StatusOr<ncclComm_t> splitOnce(const comm::Group &group);
  /// Polls `comm` until a non-blocking call on it has settled, within the
  /// deadline; on failure or timeout aborts every communicator.
  absl::Status settle(ncclComm_t comm, ncclResult_t result, const char *what);
  /// A completion marker recorded on `stream` (an event, reused).
  absl::StatusOr<cudaEvent_t> marker(cudaStream_t stream);

  ncclComm_t comm;
  int rank;
  absl::Duration timeout;
  /// Every live communicator, the world's first (abortAll's list).
  std::vector<ncclComm_t> comms;
  /// Completion markers: events made once and reused (they outlive the
  /// watch, which hands back the ones it holds).
  std::unique_ptr<EventPool> markers;
  std::unique_ptr<CollectiveWatch> watch_;
};

/// OK, or an error "what: NCCL's message".
absl::Status ncclStatus(ncclResult_t result, const char *what,
                        ncclComm_t comm = nullptr);

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_NCCL_H
