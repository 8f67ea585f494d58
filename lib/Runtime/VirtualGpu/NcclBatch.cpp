//===- NcclBatch.cpp - the work of a batch of NCCL operations -------------===//
//
// What runs on the stream for a batch (NcclState.h). Three phases:
//  1. signatures: each operation's signature (its number, kind, type,
//     count, reduction; the peer of a send or receive) goes to every rank
//     it involves, and theirs come back. Ranks that issued different
//     operations, and ranks whose injected fault failed theirs, are found
//     here, before any data moves: the communicator's asynchronous error
//     then names both sides. Every rank of an operation sees the same
//     signatures, so all of them decide alike.
//  2. data: the operations that matched move their data. A collective sends
//     each peer this rank's whole contribution (reduceScatter: the peer's
//     block) and every rank reduces all of them itself, in rank order
//     (NcclReduce.h).
//  3. local: reductions, this rank's own block, and sends to itself.
// A batch waits only in Exchange::wait, which ncclCommAbort stops.
//
//===----------------------------------------------------------------------===//
#include "NcclExchange.h"
#include "NcclReduce.h"
#include "NcclState.h"
#include "Runtime.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace moe::rt::virtual_gpu::nccl {
namespace {

/// What one rank issued, as its peers are told.
struct Signature {
  uint64_t sequence;
  uint64_t count;
  int32_t kind;
  int32_t type;
  /// -1 for operations that do not reduce.
  int32_t redOp;
  /// The other rank of a send or receive, -1 for a collective.
  int32_t peer;
  /// ncclSuccess, or the error this rank's injected fault gave it.
  int32_t failure;
  int32_t rank;
};

bool reduces(OpKind kind) {
  return kind == OpKind::AllReduce || kind == OpKind::ReduceScatter;
}

Signature signatureOf(const Op &op, int rank, ncclResult_t failure) {
  return {op.sequence,
          op.count,
          static_cast<int32_t>(op.kind),
          static_cast<int32_t>(op.type),
          reduces(op.kind) ? static_cast<int32_t>(op.redOp) : -1,
          isCollective(op.kind) ? -1 : op.peer,
          static_cast<int32_t>(failure),
          rank};
}

/// The operation a peer's signature describes, for messages.
Op operationOf(const Signature &s) {
  return {static_cast<OpKind>(s.kind),
          nullptr,
          nullptr,
          s.count,
          static_cast<ncclDataType_t>(s.type),
          static_cast<ncclRedOp_t>(s.redOp),
          s.peer,
          s.sequence};
}

bool sameCollective(const Signature &a, const Signature &b) {
  return a.sequence == b.sequence && a.kind == b.kind && a.type == b.type &&
         a.count == b.count && a.redOp == b.redOp;
}

/// One operation on its way through the phases.
struct Progress {
  const Op *op;
  Signature mine;
  /// Collectives: every rank's, by rank; sends and receives: the peer's.
  std::vector<Signature> theirs;
  bool matched = false;
  /// The peers' contributions to a reduction, by rank.
  std::vector<std::vector<char>> blocks;
};

/// "collective 3 on comm 0:1 (allReduce(float, 16, sum))", or for a group
/// "2 operations on comm 0:1 (send 1 ...: send(float, 4) to rank 1; ...)".
std::string describeBatch(const Batch &batch) {
  const Communicator &comm = *batch.comm;
  std::vector<std::string> each;
  for (const Op &op : batch.ops)
    each.push_back(
        batch.ops.size() == 1
            ? absl::StrCat(identify(op, comm), " (", describe(op), ")")
            : absl::StrCat(identify(op, comm), ": ", describe(op)));
  if (batch.ops.size() == 1)
    return each.front();
  return absl::StrCat("a group of ", batch.ops.size(), " operations on ",
                      comm.name, " (", absl::StrJoin(each, "; "), ")");
}

/// The operands of `op` lie in live device memory.
absl::Status checkOperands(const Op &op, const Communicator &comm) {
  size_t bytes = op.count * elementBytes(op.type);
  if (bytes == 0)
    return absl::OkStatus();
  size_t ranks = static_cast<size_t>(comm.size);
  size_t sendBytes = op.kind == OpKind::ReduceScatter ? bytes * ranks : bytes;
  size_t receiveBytes = op.kind == OpKind::AllGather ? bytes * ranks : bytes;
  std::string what = absl::StrCat(identify(op, comm), " (", describe(op), ")");
  if (op.kind != OpKind::Receive)
    if (absl::Status status =
            checkDeviceRange(op.send, sendBytes,
                             absl::StrCat("the send buffer of ", what).c_str());
        !status.ok())
      return status;
  if (op.kind != OpKind::Send)
    return checkDeviceRange(
        op.receive, receiveBytes,
        absl::StrCat("the receive buffer of ", what).c_str());
  return absl::OkStatus();
}

void postSignatures(Progress &p, const Communicator &comm, Exchange &ex) {
  const Op &op = *p.op;
  if (isCollective(op.kind)) {
    p.theirs.assign(static_cast<size_t>(comm.size), p.mine);
    for (int r = 0; r < comm.size; ++r) {
      if (r == comm.rank)
        continue;
      int tag = messageTag(op.sequence, 0);
      ex.send(&p.mine, sizeof(Signature), r, tag);
      ex.receive(&p.theirs[static_cast<size_t>(r)], sizeof(Signature), r, tag);
    }
    return;
  }
  p.theirs.assign(1, p.mine);
  if (op.peer == comm.rank)
    return;
  // The sender's signature travels on lane 1 ahead of its data, the
  // receiver's answer on lane 2.
  bool sends = op.kind == OpKind::Send;
  ex.send(&p.mine, sizeof(Signature), op.peer,
          messageTag(op.sequence, sends ? 1 : 2));
  ex.receive(&p.theirs[0], sizeof(Signature), op.peer,
             messageTag(op.sequence, sends ? 2 : 1));
}

/// Whether `p`'s ranks agree; else `error` (unless set already) says how.
void judge(Progress &p, const Communicator &comm, ncclResult_t &code,
           std::string &error) {
  const Op &op = *p.op;
  auto record = [&](ncclResult_t c, std::string message) {
    if (code != ncclSuccess)
      return;
    code = c;
    error = std::move(message);
  };
  for (const Signature &s : p.theirs)
    if (s.failure != ncclSuccess && s.rank != comm.rank) {
      record(
          ncclRemoteError,
          absl::StrCat(identify(op, comm), ": rank ", s.rank, " failed its ",
                       describe(operationOf(s)), " (",
                       ncclGetErrorString(static_cast<ncclResult_t>(s.failure)),
                       ")"));
      return;
    }
  if (isCollective(op.kind)) {
    const Signature &first = p.theirs[0];
    for (const Signature &s : p.theirs)
      if (!sameCollective(s, first)) {
        record(ncclInvalidUsage,
               absl::StrCat(identify(op, comm), ": rank ", first.rank,
                            " issued ", describe(operationOf(first)), ", rank ",
                            s.rank, " issued ", describe(operationOf(s))));
        return;
      }
    p.matched = true;
    return;
  }
  if (op.peer == comm.rank) {
    p.matched = true;
    return;
  }
  const Signature &peer = p.theirs[0];
  const Signature &sender = op.kind == OpKind::Send ? p.mine : peer;
  const Signature &receiver = op.kind == OpKind::Send ? peer : p.mine;
  if (sender.type != receiver.type || sender.count != receiver.count ||
      sender.sequence != receiver.sequence) {
    record(ncclInvalidUsage,
           absl::StrCat(identify(op, comm), ": rank ", sender.rank, " issued ",
                        describe(operationOf(sender)), ", rank ", receiver.rank,
                        " issued ", describe(operationOf(receiver))));
    return;
  }
  p.matched = true;
}

void postData(Progress &p, const Communicator &comm, Exchange &ex) {
  const Op &op = *p.op;
  size_t bytes = op.count * elementBytes(op.type);
  if (!isCollective(op.kind)) {
    if (op.peer == comm.rank || bytes == 0)
      return;
    int tag = messageTag(op.sequence, 1);
    if (op.kind == OpKind::Send)
      ex.send(op.send, bytes, op.peer, tag);
    else
      ex.receive(op.receive, bytes, op.peer, tag);
    return;
  }
  if (bytes == 0)
    return;
  int tag = messageTag(op.sequence, 0);
  p.blocks.resize(static_cast<size_t>(comm.size));
  for (int r = 0; r < comm.size; ++r) {
    if (r == comm.rank)
      continue;
    size_t at = static_cast<size_t>(r) * bytes;
    std::vector<char> &block = p.blocks[static_cast<size_t>(r)];
    switch (op.kind) {
    case OpKind::AllReduce:
      block.resize(bytes);
      ex.receive(block.data(), bytes, r, tag);
      ex.send(op.send, bytes, r, tag);
      break;
    case OpKind::AllGather:
      ex.receive(static_cast<char *>(op.receive) + at, bytes, r, tag);
      ex.send(op.send, bytes, r, tag);
      break;
    case OpKind::ReduceScatter:
      block.resize(bytes);
      ex.receive(block.data(), bytes, r, tag);
      ex.send(static_cast<const char *>(op.send) + at, bytes, r, tag);
      break;
    default:
      break;
    }
  }
}

/// Phase 3 for a collective: every rank's contribution is here.
void finishCollective(Progress &p, const Communicator &comm) {
  const Op &op = *p.op;
  size_t bytes = op.count * elementBytes(op.type);
  if (bytes == 0)
    return;
  size_t own = static_cast<size_t>(comm.rank) * bytes;
  if (op.kind == OpKind::AllGather) {
    char *into = static_cast<char *>(op.receive) + own;
    if (into != op.send)
      std::memmove(into, op.send, bytes);
    return;
  }
  const char *mine = static_cast<const char *>(op.send);
  if (op.kind == OpKind::ReduceScatter)
    mine += own;
  std::vector<const void *> inputs(static_cast<size_t>(comm.size));
  for (int r = 0; r < comm.size; ++r)
    inputs[static_cast<size_t>(r)] =
        r == comm.rank ? mine : p.blocks[static_cast<size_t>(r)].data();
  reduceInRankOrder(op.type, op.redOp, inputs, op.receive, op.count);
}

/// Sends to this rank itself meet its receives from itself in order (the
/// host matched their counts when the group ended).
void copyToSelf(const std::vector<Progress> &progress,
                const Communicator &comm) {
  std::vector<const Op *> sends, receives;
  for (const Progress &p : progress) {
    if (!p.matched || isCollective(p.op->kind) || p.op->peer != comm.rank)
      continue;
    (p.op->kind == OpKind::Send ? sends : receives).push_back(p.op);
  }
  for (size_t i = 0; i < sends.size() && i < receives.size(); ++i)
    if (size_t bytes = sends[i]->count * elementBytes(sends[i]->type))
      std::memmove(receives[i]->receive, sends[i]->send, bytes);
}

/// A batch stopped by ncclCommAbort says what it was waiting for, as the
/// last error and, when it was waiting (not merely queued), on stderr,
/// where a hung job's log is read.
void reportStopped(const Batch &batch, const std::string &waiting,
                   bool print = true) {
  std::string message =
      absl::StrCat("ncclCommAbort stopped ", describeBatch(batch), " on rank ",
                   batch.comm->rank, " ", waiting);
  reportError(ncclSystemError, message);
  if (print)
    std::fprintf(stderr, "virtual gpu: nccl: %s\n", message.c_str());
}

/// Waits for `ex`; false when the batch must end (aborted, or MPI failed).
bool waitFor(Exchange &ex, const Batch &batch, bool arriving) {
  absl::Status status = ex.wait();
  if (status.ok())
    return true;
  if (absl::IsAborted(status)) {
    std::vector<int> peers = ex.waitingFor();
    std::string ranks = absl::StrJoin(peers, ", ");
    reportStopped(
        batch, arriving ? absl::StrCat("while waiting for rank",
                                       peers.size() > 1 ? "s " : " ", ranks,
                                       " to arrive")
                        : absl::StrCat("while receiving data from rank",
                                       peers.size() > 1 ? "s " : " ", ranks));
    return false;
  }
  batch.comm->fail(ncclSystemError,
                   absl::StrCat(describeBatch(batch), " on rank ",
                                batch.comm->rank, ": ", status.message()));
  return false;
}

/// The batch never arrives, as a dead peer: it waits for the abort (which
/// may have come before it started).
void hang(const Batch &batch) {
  while (!batch.comm->aborted())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  reportStopped(batch, absl::StrCat("which never arrived (injected: ",
                                    batch.faultWhy, ")"));
}

} // namespace

void runBatch(const Batch &batch) {
  Communicator &comm = *batch.comm;
  // A broken or aborted communicator runs nothing more.
  if (comm.state() != ncclSuccess)
    return;
  if (comm.aborted() && batch.fault != InjectedFault::Hang)
    return reportStopped(batch, "before it started", /*print=*/false);
  for (const Op &op : batch.ops)
    if (absl::Status status = checkOperands(op, comm); !status.ok()) {
      std::string message = absl::StrCat(identify(op, comm), " on rank ",
                                         comm.rank, ": ", status.message());
      fault(cudaErrorIllegalAddress, absl::StrCat("nccl: ", message));
      comm.fail(ncclUnhandledCudaError, message);
      return;
    }
  if (batch.fault == InjectedFault::Hang)
    return hang(batch);
  ncclResult_t failure =
      batch.fault == InjectedFault::Fail ? ncclSystemError : ncclSuccess;

  std::vector<Progress> progress(batch.ops.size());
  Exchange signatures(comm);
  for (size_t i = 0; i < batch.ops.size(); ++i) {
    progress[i].op = &batch.ops[i];
    progress[i].mine = signatureOf(batch.ops[i], comm.rank, failure);
    postSignatures(progress[i], comm, signatures);
  }
  if (!waitFor(signatures, batch, /*arriving=*/true))
    return;
  if (failure != ncclSuccess) {
    comm.fail(failure,
              absl::StrCat(describeBatch(batch), " failed on rank ", comm.rank,
                           " (injected: ", batch.faultWhy, ")"));
    return;
  }

  ncclResult_t code = ncclSuccess;
  std::string error;
  Exchange data(comm);
  for (Progress &p : progress) {
    judge(p, comm, code, error);
    if (p.matched)
      postData(p, comm, data);
  }
  if (!waitFor(data, batch, /*arriving=*/false))
    return;
  for (Progress &p : progress)
    if (p.matched && isCollective(p.op->kind))
      finishCollective(p, comm);
  copyToSelf(progress, comm);
  if (code != ncclSuccess)
    comm.fail(code, error);
}

} // namespace moe::rt::virtual_gpu::nccl
