//===- NcclState.h - the NCCL emulation's communicators ---------*- C++ -*-===//
//
// Private to the virtual GPU's NCCL (Nccl*.cpp): what a communicator is,
// the operations queued on one, and how errors are recorded.
//
// A communicator of several ranks is an MPI communicator of the job's own
// (split from MPI_COMM_WORLD at ncclCommInitRankConfig, from the parent's at
// ncclCommSplit); a communicator of one rank needs no MPI at all. NCCL rank
// r is MPI rank r of it. Each operation the host issues is queued on its
// stream (Runtime.h's enqueue) as a Batch: an ungrouped call, or the calls
// of one ncclGroupStart/ncclGroupEnd on one communicator. The batch's work
// first trades signatures with its peers (what each rank issued, so that a
// divergent rank is named instead of corrupting data), then the data, then
// reduces in rank order (NcclBatch.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_NCCLSTATE_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_NCCLSTATE_H

#include "NcclFaults.h"

#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe::rt::virtual_gpu::nccl {

/// One communicator's state, shared by its handle and the work queued on it
/// (which may outlive the handle after ncclCommAbort).
class Communicator {
public:
  /// `mpi` is MPI_COMM_NULL for a communicator of one rank. A non-blocking
  /// communicator starts ncclInProgress and answers it `pendingPolls` more
  /// times to ncclCommGetAsyncError.
  Communicator(std::string name, int rank, int size, bool blocking,
               MPI_Comm mpi, int pendingPolls);
  ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// "comm 0:1", "comm 0:1/2" (the second split of it), or the config's
  /// commName.
  const std::string name;
  const int rank, size;
  const bool blocking;
  /// Freed with the communicator, unless MPI is finalised by then.
  const MPI_Comm mpi;

  /// Issue order, counted on the host: the next collective's number (from
  /// 1), the next send to `peer` and receive from `peer` (from 1 each), the
  /// next split (from 1). Every rank counts the same.
  uint64_t nextCollective();
  uint64_t nextSend(int peer);
  uint64_t nextReceive(int peer);
  int nextSplit();

  /// ncclCommGetAsyncError's answer (counting down the pending polls).
  ncclResult_t pollAsyncError();
  /// The state without polling: ncclInProgress, ncclSuccess or the error.
  ncclResult_t state() const;
  /// Records the communicator's first error and its message, which
  /// ncclGetLastError then returns; later operations on it do nothing.
  void fail(ncclResult_t code, const std::string &message);
  std::string lastError() const;

  /// ncclCommAbort: the work waiting on peers returns, queued work skips.
  void abort() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(); }

  /// Batches queued whose work has not yet run or been skipped, which
  /// ncclCommDestroy waits for.
  void batchQueued();
  void batchFinished();
  void waitForBatches();

private:
  mutable std::mutex mutex;
  std::condition_variable idle;
  ncclResult_t state_;
  int pendingPolls;
  std::string message;
  uint64_t collectives = 0;
  std::vector<uint64_t> sends, receives;
  int splits = 0;
  int batchesInFlight = 0;
  std::atomic<bool> aborted_{false};
};

/// The live handles: a handle that was destroyed, aborted or never made is
/// refused (ncclInvalidArgument) instead of being used.
ncclComm_t registerCommunicator(std::shared_ptr<Communicator> comm);
std::shared_ptr<Communicator> findCommunicator(ncclComm_t handle);
std::shared_ptr<Communicator> unregisterCommunicator(ncclComm_t handle);

/// Records `message` as ncclGetLastError's answer and returns `code`.
ncclResult_t reportError(ncclResult_t code, const std::string &message);

/// Whether MPI is initialised and not finalised: communicators of several
/// ranks are possible.
bool mpiRunning();
/// This process's rank in MPI_COMM_WORLD, 0 without MPI.
int processRank();

enum class OpKind : int32_t {
  AllReduce = 1,
  AllGather,
  ReduceScatter,
  Send,
  Receive
};

bool isCollective(OpKind kind);

/// One NCCL call as queued.
struct Op {
  OpKind kind;
  const void *send;
  void *receive;
  /// Elements: per rank for allGather's send and reduceScatter's receive.
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t redOp;
  /// The other rank of a send or receive.
  int peer;
  /// The collective's number on its communicator, or the send's (receive's)
  /// number on its pair of ranks; set when the batch is queued.
  uint64_t sequence;
};

/// "allReduce(float, 4096, sum)", "allGather(float, 2048)",
/// "send(bfloat16, 64) to rank 1", "recv(int32, 8) from rank 0".
std::string describe(const Op &op);
/// "collective 17 on comm 0:1", "send 3 from rank 0 to rank 1 on comm 0:1".
std::string identify(const Op &op, const Communicator &comm);

/// One batch of operations on one communicator, run by one stream's work.
struct Batch {
  std::shared_ptr<Communicator> comm;
  std::vector<Op> ops;
  InjectedFault fault = InjectedFault::None;
  /// The fault's description, for messages.
  std::string faultWhy;
};

/// The work of a batch (NcclBatch.cpp): operands checked against live
/// device memory, signatures and data traded with the peers, reductions in
/// rank order. Failures become the communicator's asynchronous error.
void runBatch(const Batch &batch);

/// Bytes of one element of `type`, 0 for a type NCCL does not have.
size_t elementBytes(ncclDataType_t type);
/// "float", "bfloat16", ... ("type 42" for an unknown one).
std::string typeName(ncclDataType_t type);
/// "sum", "prod", "max", "min", "avg" ("op 42" for an unknown one).
std::string redOpName(ncclRedOp_t op);

} // namespace moe::rt::virtual_gpu::nccl

/// NCCL's opaque communicator: a handle on the shared state.
struct ncclComm {
  std::shared_ptr<moe::rt::virtual_gpu::nccl::Communicator> state;
};

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_NCCLSTATE_H
