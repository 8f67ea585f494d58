//===- NcclCalls.cpp - NCCL's collectives, sends and groups ---------------===//
//
// ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclSend, ncclRecv,
// ncclGroupStart and ncclGroupEnd for the virtual GPU. A call is checked on
// the host (the communicator, type, reduction, peer and pointers, as NCCL
// checks them) and queued: inside a group until ncclGroupEnd, else at once.
// Queuing numbers the operations in issue order, which every rank must
// share, and puts one batch per communicator on its stream (NcclState.h).
//
// A group's sends to this rank itself must meet receives from itself in the
// same group, with the same type and count (NCCL would wait for them
// forever): ncclGroupEnd refuses the group otherwise. All of a group's
// operations on one communicator go on one stream. A non-blocking
// communicator's ncclGroupEnd answers ncclInProgress, as NCCL may.
//
//===----------------------------------------------------------------------===//
#include "NcclFaults.h"
#include "NcclReduce.h"
#include "NcclState.h"
#include "Runtime.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

using namespace moe::rt::virtual_gpu;
using namespace moe::rt::virtual_gpu::nccl;

namespace {

/// A call waiting for its group to end.
struct Queued {
  std::shared_ptr<Communicator> comm;
  cudaStream_t stream;
  Op op;
  const char *call;
};

/// This thread's open group (NCCL's groups are per thread).
struct OpenGroup {
  int depth = 0;
  std::vector<Queued> calls;
  /// The first refused call's result, which ncclGroupEnd returns.
  ncclResult_t refused = ncclSuccess;
};

OpenGroup &openGroup() {
  thread_local OpenGroup group;
  return group;
}

/// The host's checks of one call; ncclSuccess when it may be queued.
ncclResult_t checkCall(const char *call, const Communicator &comm,
                       const Op &op) {
  std::string where = absl::StrCat(call, " on ", comm.name);
  ncclResult_t state = comm.state();
  if (state == ncclInProgress)
    return reportError(
        ncclInvalidUsage,
        absl::StrCat(where, ": the communicator is still being made: poll "
                            "ncclCommGetAsyncError until it is no longer "
                            "ncclInProgress"));
  if (state != ncclSuccess)
    return reportError(state, absl::StrCat(where,
                                           ": the communicator has "
                                           "failed: ",
                                           comm.lastError()));
  if (elementBytes(op.type) == 0)
    return reportError(
        ncclInvalidArgument,
        absl::StrCat(where, ": unknown data type ", static_cast<int>(op.type)));
  bool reduces =
      op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter;
  if (reduces && !canReduce(op.type, op.redOp))
    return reportError(ncclInvalidArgument,
                       absl::StrCat(where, ": the virtual GPU does not reduce ",
                                    typeName(op.type), " with ",
                                    redOpName(op.redOp)));
  if (!isCollective(op.kind) && (op.peer < 0 || op.peer >= comm.size))
    return reportError(ncclInvalidArgument,
                       absl::StrCat(where, ": peer ", op.peer,
                                    " is not a rank of ", comm.size));
  bool needsSend = op.kind != OpKind::Receive;
  bool needsReceive = op.kind != OpKind::Send;
  if (op.count > 0 &&
      ((needsSend && !op.send) || (needsReceive && !op.receive)))
    return reportError(
        ncclInvalidArgument,
        absl::StrCat(where, ": a null buffer for ", op.count, " elements"));
  return ncclSuccess;
}

/// Refuses a group whose sends to this rank itself and receives from itself
/// do not pair up.
ncclResult_t checkSelfPairs(const std::vector<Queued *> &calls) {
  std::vector<const Queued *> sends, receives;
  for (const Queued *q : calls)
    if (!isCollective(q->op.kind) && q->op.peer == q->comm->rank)
      (q->op.kind == OpKind::Send ? sends : receives).push_back(q);
  for (size_t i = 0; i < std::max(sends.size(), receives.size()); ++i) {
    if (i >= sends.size() || i >= receives.size()) {
      const Queued &alone = i < sends.size() ? *sends[i] : *receives[i];
      return reportError(
          ncclInvalidUsage,
          absl::StrCat(
              "ncclGroupEnd: ", describe(alone.op), " on ", alone.comm->name,
              " has no matching ", i < sends.size() ? "receive" : "send",
              " in its group (rank ", alone.comm->rank, " is its own peer)"));
    }
    const Op &send = sends[i]->op, &receive = receives[i]->op;
    if (send.type != receive.type || send.count != receive.count)
      return reportError(ncclInvalidUsage,
                         absl::StrCat("ncclGroupEnd: on ", sends[i]->comm->name,
                                      " rank ", sends[i]->comm->rank,
                                      " issued ", describe(send), " and ",
                                      describe(receive), ", which differ"));
  }
  return ncclSuccess;
}

/// A batch in flight on its communicator from its queuing until its work
/// is gone: run, or skipped after a fault or at exit, which destroys it
/// unrun. ncclCommDestroy waits for it.
class InFlight {
public:
  explicit InFlight(std::shared_ptr<Communicator> comm)
      : comm(std::move(comm)) {
    this->comm->batchQueued();
  }
  ~InFlight() { comm->batchFinished(); }
  InFlight(const InFlight &) = delete;
  InFlight &operator=(const InFlight &) = delete;

private:
  std::shared_ptr<Communicator> comm;
};

/// Numbers `calls` (all on one communicator and stream) and puts them on
/// the stream as one batch.
ncclResult_t queueBatch(const std::vector<Queued *> &calls) {
  Communicator &comm = *calls.front()->comm;
  cudaStream_t stream = calls.front()->stream;
  Batch batch;
  batch.comm = calls.front()->comm;
  for (Queued *q : calls) {
    Op op = q->op;
    if (isCollective(op.kind))
      op.sequence = comm.nextCollective();
    else if (op.kind == OpKind::Send)
      op.sequence = comm.nextSend(op.peer);
    else
      op.sequence = comm.nextReceive(op.peer);
    batch.ops.push_back(op);
  }
  batch.fault = nextOperationFault(batch.faultWhy);
  std::string what = absl::StrCat(calls.front()->call, " on ", comm.name);
  markCommunicationStream(stream);
  auto inFlight = std::make_shared<InFlight>(batch.comm);
  if (cudaError_t queued =
          enqueue(stream, what,
                  [batch = std::move(batch), inFlight] { runBatch(batch); });
      queued != cudaSuccess) {
    // The numbers are spent on this rank only: the communicator is broken.
    std::string message = absl::StrCat(
        what, ": the stream refused it: ", cudaGetErrorString(queued));
    comm.fail(ncclUnhandledCudaError, message);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/// Ends the outermost group: checks it, then one batch per communicator.
ncclResult_t submit(std::vector<Queued> calls) {
  std::vector<std::vector<Queued *>> perComm;
  for (Queued &q : calls) {
    auto same = std::find_if(perComm.begin(), perComm.end(), [&](auto &c) {
      return c.front()->comm == q.comm;
    });
    if (same == perComm.end()) {
      perComm.push_back({&q});
      continue;
    }
    if (same->front()->stream != q.stream)
      return reportError(
          ncclInvalidUsage,
          absl::StrCat("ncclGroupEnd: ", q.call, " on ", q.comm->name,
                       " uses another stream than the group's earlier calls "
                       "on it; the virtual GPU runs a group's operations on "
                       "one communicator on one stream"));
    same->push_back(&q);
  }
  for (const std::vector<Queued *> &group : perComm)
    if (ncclResult_t paired = checkSelfPairs(group); paired != ncclSuccess)
      return paired;
  bool anyNonBlocking = false;
  for (const std::vector<Queued *> &group : perComm) {
    if (ncclResult_t queued = queueBatch(group); queued != ncclSuccess)
      return queued;
    anyNonBlocking |= !group.front()->comm->blocking;
  }
  return anyNonBlocking ? ncclInProgress : ncclSuccess;
}

/// Checks a call and queues it in the open group, or alone.
ncclResult_t issue(const char *call, ncclComm_t handle, cudaStream_t stream,
                   const Op &op) {
  OpenGroup &group = openGroup();
  std::shared_ptr<Communicator> comm = findCommunicator(handle);
  ncclResult_t checked =
      comm ? checkCall(call, *comm, op)
           : reportError(ncclInvalidArgument,
                         absl::StrCat(call, ": not a live communicator (null, "
                                            "destroyed, aborted or never "
                                            "made)"));
  if (checked != ncclSuccess) {
    if (group.depth > 0 && group.refused == ncclSuccess)
      group.refused = checked;
    return checked;
  }
  Queued queued{std::move(comm), stream, op, call};
  if (group.depth > 0) {
    group.calls.push_back(std::move(queued));
    return ncclSuccess;
  }
  ncclResult_t submitted = submit({std::move(queued)});
  // Alone, a non-blocking communicator's call is queued when it returns.
  return submitted == ncclInProgress ? ncclSuccess : submitted;
}

Op makeOp(OpKind kind, const void *send, void *receive, size_t count,
          ncclDataType_t type, ncclRedOp_t redOp, int peer) {
  return {kind, send, receive, count, type, redOp, peer, 0};
}

} // namespace

extern "C" ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff,
                                      size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  return issue(
      "ncclAllReduce", comm, stream,
      makeOp(OpKind::AllReduce, sendbuff, recvbuff, count, datatype, op, -1));
}

extern "C" ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                                      size_t sendcount, ncclDataType_t datatype,
                                      ncclComm_t comm, cudaStream_t stream) {
  return issue("ncclAllGather", comm, stream,
               makeOp(OpKind::AllGather, sendbuff, recvbuff, sendcount,
                      datatype, ncclSum, -1));
}

extern "C" ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                          size_t recvcount,
                                          ncclDataType_t datatype,
                                          ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream) {
  return issue("ncclReduceScatter", comm, stream,
               makeOp(OpKind::ReduceScatter, sendbuff, recvbuff, recvcount,
                      datatype, op, -1));
}

extern "C" ncclResult_t ncclSend(const void *sendbuff, size_t count,
                                 ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, cudaStream_t stream) {
  return issue(
      "ncclSend", comm, stream,
      makeOp(OpKind::Send, sendbuff, nullptr, count, datatype, ncclSum, peer));
}

extern "C" ncclResult_t ncclRecv(void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, cudaStream_t stream) {
  return issue("ncclRecv", comm, stream,
               makeOp(OpKind::Receive, nullptr, recvbuff, count, datatype,
                      ncclSum, peer));
}

extern "C" ncclResult_t ncclGroupStart() {
  ++openGroup().depth;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd() {
  OpenGroup &group = openGroup();
  if (group.depth == 0)
    return reportError(ncclInvalidUsage,
                       "ncclGroupEnd: no group was started on this thread");
  if (--group.depth > 0)
    return ncclSuccess;
  std::vector<Queued> calls = std::move(group.calls);
  group.calls.clear();
  ncclResult_t refused = group.refused;
  group.refused = ncclSuccess;
  // A group with a refused call queues nothing.
  if (refused != ncclSuccess)
    return refused;
  if (calls.empty())
    return ncclSuccess;
  return submit(std::move(calls));
}
