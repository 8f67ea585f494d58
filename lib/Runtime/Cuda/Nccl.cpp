//===- Nccl.cpp - NCCL communicators over the mesh's groups ---------------===//
#include "moe/Runtime/Cuda/Nccl.h"

#include "CollectiveWatch.h"
#include "CudaStatus.h"
#include "DeviceBuffer.h"
#include "EventPool.h"

#include "moe/Runtime/Cuda/Kernels.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>

namespace moe::rt::cuda {
namespace {

/// NCCL counts are size_t; ours are int64 element counts.
absl::Status checkCount(int64_t count, const char *what) {
  if (count < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative element count ", count));
  return absl::OkStatus();
}

/// A non-blocking communicator's configuration.
ncclConfig_t nonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

std::string elements(int64_t count, const char *type) {
  return absl::StrCat(count, " ", type);
}

} // namespace

absl::Status ncclStatus(ncclResult_t result, const char *what,
                        ncclComm_t comm) {
  if (result == ncclSuccess)
    return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result));
  const char *detail = ncclGetLastError(comm);
  if (detail && *detail)
    absl::StrAppend(&message, " (", detail, ")");
  return absl::FailedPreconditionError(message);
}

absl::StatusOr<std::unique_ptr<NcclWorld>>
NcclWorld::create(comm::Group &everyone, int device) {
  MOE_CUDA_OK(cudaSetDevice(device));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  absl::Status created;
  if (everyone.rank() == 0)
    created = ncclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
  // The 128 bytes of the id travel as int32s over MPI, then a flag: rank 0
  // broadcasts even when it has no id, so the others do not wait for one.
  static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
  std::vector<int32_t> words(sizeof(ncclUniqueId) / sizeof(int32_t) + 1);
  std::memcpy(words.data(), &id, sizeof(id));
  words.back() = created.ok() ? 0 : 1;
  if (absl::Status status = everyone.broadcast(absl::MakeSpan(words), 0);
      !status.ok())
    return absl::Status(status.code(),
                        absl::StrCat("sharing the NCCL unique id: ",
                                     status.message()));
  if (!created.ok())
    return created;
  if (words.back() != 0)
    return absl::FailedPreconditionError(
        "ncclGetUniqueId failed on rank 0: no NCCL communicator");
  std::memcpy(&id, words.data(), sizeof(id));
  ncclConfig_t config = nonBlocking();
  ncclComm_t comm = nullptr;
  ncclResult_t started = ncclCommInitRankConfig(&comm, everyone.size(), id,
                                                everyone.rank(), &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    absl::Status failed = ncclStatus(started, "ncclCommInitRankConfig", comm);
    if (comm)
      ncclCommAbort(comm);
    return failed;
  }
  std::unique_ptr<NcclWorld> world(
      new NcclWorld(comm, everyone.rank(), everyone.timeout()));
  if (absl::Status status =
          world->settle(comm, started, "ncclCommInitRankConfig");
      !status.ok())
    return status;
  return world;
}

NcclWorld::NcclWorld(ncclComm_t comm, int rank, absl::Duration timeout)
    : comm(comm), rank(rank), timeout(timeout), comms{comm},
      markers(std::make_unique<EventPool>(cudaEventDisableTiming)) {
  CollectiveWatch::Hooks hooks;
  hooks.reached = [](void *marker) {
    return queryDone(cudaEventQuery(static_cast<cudaEvent_t>(marker)),
                     "a collective's completion");
  };
  hooks.release = [this](void *marker) {
    markers->give(static_cast<cudaEvent_t>(marker));
  };
  hooks.asyncError = [this]() -> absl::Status {
    for (ncclComm_t c : comms) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t asked = ncclCommGetAsyncError(c, &state);
      if (asked != ncclSuccess)
        return ncclStatus(asked, "ncclCommGetAsyncError", c);
      if (state != ncclSuccess && state != ncclInProgress)
        return ncclStatus(state, "ncclCommGetAsyncError", c);
    }
    return absl::OkStatus();
  };
  hooks.abortAll = [this] {
    for (ncclComm_t c : comms)
      ncclCommAbort(c);
  };
  watch_ = std::make_unique<CollectiveWatch>(std::move(hooks), timeout);
}

absl::Status NcclWorld::settle(ncclComm_t on, ncclResult_t result,
                               const char *what) {
  if (result == ncclInProgress) {
    absl::Time start = absl::Now();
    for (;;) {
      ncclResult_t asked = ncclCommGetAsyncError(on, &result);
      if (asked != ncclSuccess)
        result = asked;
      if (result != ncclInProgress)
        break;
      if (absl::Now() - start > timeout)
        return watch_->abort(absl::DeadlineExceededError(absl::StrFormat(
            "%s did not settle within the deadline (MOE_COMM_TIMEOUT_S) of "
            "%.1f s; aborted the job's NCCL communicators",
            what, absl::ToDoubleSeconds(timeout))));
      absl::SleepFor(absl::Microseconds(50));
    }
  }
  if (result == ncclSuccess)
    return absl::OkStatus();
  return watch_->abort(ncclStatus(result, what, on));
}

absl::StatusOr<cudaEvent_t> NcclWorld::marker(cudaStream_t stream) {
  absl::StatusOr<cudaEvent_t> event = markers->take();
  if (!event.ok())
    return event.status();
  if (absl::Status status =
          cudaStatus(cudaEventRecord(*event, stream), "cudaEventRecord");
      !status.ok()) {
    markers->give(*event);
    return status;
  }
  return *event;
}

NcclWorld::~NcclWorld() {
  // Markers go back to their pool, which destroys them after this body;
  // aborted communicators are gone.
  bool aborted = watch_ && watch_->aborted();
  watch_.reset();
  if (comm && !aborted)
    ncclCommDestroy(comm);
}

absl::StatusOr<ncclComm_t> NcclWorld::splitOnce(const comm::Group &group) {
  // One colour per group: its first world rank, which no other group has.
  int colour = static_cast<int>(group.worldRanks().front());
  ncclConfig_t config = nonBlocking();
  ncclComm_t child = nullptr;
  ncclResult_t started =
      ncclCommSplit(comm, colour, group.rank(), &child, &config);
  if (child)
    comms.push_back(child);
  if (absl::Status status =
          settle(child ? child : comm, started, "ncclCommSplit");
      !status.ok())
    return status;
  return child;
}

absl::StatusOr<std::unique_ptr<NcclGroup>>
NcclWorld::split(const comm::Group &group, bool reductionLane) {
  std::string label = group.name() + " (world ranks " +
                      absl::StrJoin(group.worldRanks(), ", ") + ")";
  absl::StatusOr<ncclComm_t> child = splitOnce(group);
  if (!child.ok())
    return child.status();
  std::unique_ptr<NcclGroup> made(
      new NcclGroup(*child, group.rank(), group.size(), this, label));
  if (reductionLane) {
    absl::StatusOr<ncclComm_t> second = splitOnce(group);
    if (!second.ok())
      return second.status();
    made->reductionLane.reset(new NcclGroup(*second, group.rank(), group.size(),
                                            this, label + ", reductions"));
  }
  return made;
}

NcclGroup::~NcclGroup() {
  if (!comm)
    return;
  auto &comms = world->comms;
  comms.erase(std::remove(comms.begin(), comms.end(), comm), comms.end());
  if (!world->watch().aborted())
    ncclCommDestroy(comm);
}

absl::Status NcclGroup::issued(ncclResult_t result, const char *call,
                               const std::string &what, cudaStream_t stream) {
  std::string described = absl::StrCat(call, " of ", what, " on group ", label);
  if (absl::Status status = world->settle(comm, result, described.c_str());
      !status.ok())
    return status;
  absl::StatusOr<cudaEvent_t> marker = world->marker(stream);
  if (!marker.ok())
    return world->watch().abort(marker.status());
  world->watch().enqueued(std::move(described), *marker);
  return absl::OkStatus();
}

absl::Status NcclGroup::allReduceSum(float *data, int64_t count,
                                     cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllReduce"); !status.ok())
    return status;
  return issued(ncclAllReduce(data, data, static_cast<size_t>(count),
                              ncclFloat32, ncclSum, comm, stream),
                "ncclAllReduce (sum)", elements(count, "float32"), stream);
}

absl::Status NcclGroup::allReduceSum(uint16_t *bf16, int64_t count,
                                     cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllGather"); !status.ok())
    return status;
  if (count == 0)
    return absl::OkStatus();
  // Every rank's block, in rank order, then their fp32 sum rounded once
  // (Bf16Sum.cu): the CPU's sum, where ncclBfloat16's ring would round
  // after every hop.
  MOE_DEVICE_BUFFER(uint16_t, blocks, count * size_, stream);
  MOE_CUDA_TRY(allGatherBytes(bf16, blocks.get(),
                              count * static_cast<int64_t>(sizeof(uint16_t)),
                              stream));
  return sumBf16Rows(blocks.get(), size_, count, bf16, stream);
}

template <typename T>
absl::Status NcclGroup::sumInRankOrderOf(T *values, int64_t count,
                                         cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllGather"); !status.ok())
    return status;
  if (count == 0)
    return absl::OkStatus();
  MOE_DEVICE_BUFFER(T, rows, count * size_, stream);
  MOE_CUDA_TRY(allGatherBytes(values, rows.get(),
                              count * static_cast<int64_t>(sizeof(T)), stream));
  return sumRowsInRankOrder(rows.get(), size_, count, values, stream);
}

absl::Status NcclGroup::sumInRankOrder(double *values, int64_t count,
                                       cudaStream_t stream) {
  return sumInRankOrderOf(values, count, stream);
}

absl::Status NcclGroup::sumInRankOrder(unsigned long long *values,
                                       int64_t count, cudaStream_t stream) {
  return sumInRankOrderOf(values, count, stream);
}

absl::Status NcclGroup::allReduceMax(float *data, int64_t count,
                                     cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllReduce"); !status.ok())
    return status;
  return issued(ncclAllReduce(data, data, static_cast<size_t>(count),
                              ncclFloat32, ncclMax, comm, stream),
                "ncclAllReduce (max)", elements(count, "float32"), stream);
}

absl::Status NcclGroup::allGatherBytes(const void *input, void *output,
                                       int64_t bytes, cudaStream_t stream) {
  if (absl::Status status = checkCount(bytes, "ncclAllGather"); !status.ok())
    return status;
  return issued(ncclAllGather(input, output, static_cast<size_t>(bytes),
                              ncclUint8, comm, stream),
                "ncclAllGather", elements(bytes, "bytes"), stream);
}

absl::Status NcclGroup::allGather(const float *input, float *output,
                                  int64_t count, cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllGather"); !status.ok())
    return status;
  return issued(ncclAllGather(input, output, static_cast<size_t>(count),
                              ncclFloat32, comm, stream),
                "ncclAllGather", elements(count, "float32"), stream);
}

absl::Status NcclGroup::reduceScatterSum(const float *input, float *output,
                                         int64_t count, cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclReduceScatter");
      !status.ok())
    return status;
  return issued(ncclReduceScatter(input, output, static_cast<size_t>(count),
                                  ncclFloat32, ncclSum, comm, stream),
                "ncclReduceScatter", elements(count, "float32"), stream);
}

absl::Status NcclGroup::reduceScatterSum(const uint16_t *input,
                                         uint16_t *output, int64_t count,
                                         cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclReduceScatter");
      !status.ok())
    return status;
  if (count == 0)
    return absl::OkStatus();
  // Block r of every rank to rank r, in rank order, then their fp32 sum
  // rounded once, as allReduceSum's.
  std::vector<int64_t> one(static_cast<size_t>(size_), 1);
  MOE_DEVICE_BUFFER(uint16_t, blocks, count * size_, stream);
  MOE_CUDA_TRY(allToAllRowsOf(input, one, blocks.get(), one, count,
                              ncclBfloat16, sizeof(uint16_t), stream));
  return sumBf16Rows(blocks.get(), size_, count, output, stream);
}

absl::Status NcclGroup::allToAllRows(const float *input,
                                     const std::vector<int64_t> &sendRows,
                                     float *output,
                                     const std::vector<int64_t> &recvRows,
                                     int64_t width, cudaStream_t stream) {
  return allToAllRowsOf(input, sendRows, output, recvRows, width, ncclFloat32,
                        sizeof(float), stream);
}

absl::Status NcclGroup::allToAllRows(const uint16_t *input,
                                     const std::vector<int64_t> &sendRows,
                                     uint16_t *output,
                                     const std::vector<int64_t> &recvRows,
                                     int64_t width, cudaStream_t stream) {
  return allToAllRowsOf(input, sendRows, output, recvRows, width,
                        ncclBfloat16, sizeof(uint16_t), stream);
}

absl::Status NcclGroup::allToAllRows(const int32_t *input,
                                     const std::vector<int64_t> &sendRows,
                                     int32_t *output,
                                     const std::vector<int64_t> &recvRows,
                                     int64_t width, cudaStream_t stream) {
  return allToAllRowsOf(input, sendRows, output, recvRows, width, ncclInt32,
                        sizeof(int32_t), stream);
}

absl::Status NcclGroup::allToAllRowsOf(const void *input,
                                       const std::vector<int64_t> &sendRows,
                                       void *output,
                                       const std::vector<int64_t> &recvRows,
                                       int64_t width, ncclDataType_t type,
                                       size_t elementBytes,
                                       cudaStream_t stream) {
  if (sendRows.size() != static_cast<size_t>(size_) ||
      recvRows.size() != static_cast<size_t>(size_))
    return absl::InvalidArgumentError(absl::StrCat(
        "all-to-all: expected ", size_, " send and receive counts, got ",
        sendRows.size(), " and ", recvRows.size()));
  // One send and one receive per peer, fused by NCCL into one operation.
  if (absl::Status status = ncclStatus(ncclGroupStart(), "ncclGroupStart");
      !status.ok())
    return status;
  // Inside the group the calls only queue (a non-blocking communicator
  // may answer ncclInProgress); ncclGroupEnd issues them.
  auto queued = [&](ncclResult_t result, const char *call) {
    return result == ncclInProgress ? absl::OkStatus()
                                    : ncclStatus(result, call, comm);
  };
  absl::Status failed;
  int64_t sent = 0, received = 0;
  for (int peer = 0; peer < size_ && failed.ok(); ++peer) {
    size_t sendCount = static_cast<size_t>(sendRows[peer] * width);
    size_t recvCount = static_cast<size_t>(recvRows[peer] * width);
    if (sendCount > 0)
      failed = queued(
          ncclSend(static_cast<const char *>(input) + sent * elementBytes,
                   sendCount, type, peer, comm, stream),
          "ncclSend");
    if (failed.ok() && recvCount > 0)
      failed =
          queued(ncclRecv(static_cast<char *>(output) + received * elementBytes,
                          recvCount, type, peer, comm, stream),
                 "ncclRecv");
    sent += static_cast<int64_t>(sendCount);
    received += static_cast<int64_t>(recvCount);
  }
  // The group must be closed even after a failed call.
  ncclResult_t closed = ncclGroupEnd();
  if (!failed.ok()) {
    if (closed == ncclInProgress)
      world->settle(comm, closed, "ncclGroupEnd").IgnoreError();
    return world->watch().abort(failed);
  }
  return issued(closed, "all-to-all (ncclSend/ncclRecv)",
                absl::StrCat(elements(sent, "elements"), " out, ",
                             elements(received, "elements"), " in"),
                stream);
}

} // namespace moe::rt::cuda
