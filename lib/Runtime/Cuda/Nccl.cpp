//===- Nccl.cpp - NCCL communicators over the mesh's groups ---------------===//
#include "moe/Runtime/Cuda/Nccl.h"

#include "CudaStatus.h"
#include "DeviceBuffer.h"

#include "moe/Runtime/Cuda/Kernels.h"

#include "absl/strings/str_cat.h"

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
  ncclComm_t comm = nullptr;
  if (absl::Status status =
          ncclStatus(ncclCommInitRank(&comm, everyone.size(), id,
                                      everyone.rank()),
                     "ncclCommInitRank");
      !status.ok())
    return status;
  return std::unique_ptr<NcclWorld>(new NcclWorld(comm, everyone.rank()));
}

NcclWorld::~NcclWorld() {
  if (comm)
    ncclCommDestroy(comm);
}

absl::StatusOr<std::unique_ptr<NcclGroup>>
NcclWorld::split(const comm::Group &group) {
  // One colour per group: its first world rank, which no other group has.
  int colour = static_cast<int>(group.worldRanks().front());
  ncclComm_t child = nullptr;
  if (absl::Status status =
          ncclStatus(ncclCommSplit(comm, colour, group.rank(), &child, nullptr),
                     "ncclCommSplit", comm);
      !status.ok())
    return status;
  return std::unique_ptr<NcclGroup>(
      new NcclGroup(child, group.rank(), group.size()));
}

NcclGroup::~NcclGroup() {
  if (comm)
    ncclCommDestroy(comm);
}

absl::Status NcclGroup::allReduceSum(float *data, int64_t count,
                                     cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllReduce"); !status.ok())
    return status;
  return ncclStatus(ncclAllReduce(data, data, static_cast<size_t>(count),
                                  ncclFloat32, ncclSum, comm, stream),
                    "ncclAllReduce", comm);
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

absl::Status NcclGroup::allReduceMax(float *data, int64_t count,
                                     cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllReduce"); !status.ok())
    return status;
  return ncclStatus(ncclAllReduce(data, data, static_cast<size_t>(count),
                                  ncclFloat32, ncclMax, comm, stream),
                    "ncclAllReduce", comm);
}

absl::Status NcclGroup::allGatherBytes(const void *input, void *output,
                                       int64_t bytes, cudaStream_t stream) {
  if (absl::Status status = checkCount(bytes, "ncclAllGather"); !status.ok())
    return status;
  return ncclStatus(ncclAllGather(input, output, static_cast<size_t>(bytes),
                                  ncclUint8, comm, stream),
                    "ncclAllGather", comm);
}

absl::Status NcclGroup::allGather(const float *input, float *output,
                                  int64_t count, cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclAllGather"); !status.ok())
    return status;
  return ncclStatus(ncclAllGather(input, output, static_cast<size_t>(count),
                                  ncclFloat32, comm, stream),
                    "ncclAllGather", comm);
}

absl::Status NcclGroup::reduceScatterSum(const float *input, float *output,
                                         int64_t count, cudaStream_t stream) {
  if (absl::Status status = checkCount(count, "ncclReduceScatter");
      !status.ok())
    return status;
  return ncclStatus(ncclReduceScatter(input, output, static_cast<size_t>(count),
                                      ncclFloat32, ncclSum, comm, stream),
                    "ncclReduceScatter", comm);
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
  absl::Status failed;
  int64_t sent = 0, received = 0;
  for (int peer = 0; peer < size_ && failed.ok(); ++peer) {
    size_t sendCount = static_cast<size_t>(sendRows[peer] * width);
    size_t recvCount = static_cast<size_t>(recvRows[peer] * width);
    if (sendCount > 0)
      failed = ncclStatus(
          ncclSend(static_cast<const char *>(input) + sent * elementBytes,
                   sendCount, type, peer, comm, stream),
          "ncclSend", comm);
    if (failed.ok() && recvCount > 0)
      failed = ncclStatus(
          ncclRecv(static_cast<char *>(output) + received * elementBytes,
                   recvCount, type, peer, comm, stream),
          "ncclRecv", comm);
    sent += static_cast<int64_t>(sendCount);
    received += static_cast<int64_t>(recvCount);
  }
  // The group must be closed even after a failed call.
  absl::Status closed = ncclStatus(ncclGroupEnd(), "ncclGroupEnd", comm);
  return failed.ok() ? closed : failed;
}

} // namespace moe::rt::cuda
