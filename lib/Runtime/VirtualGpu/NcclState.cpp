//===- NcclState.cpp - the NCCL emulation's communicators -----------------===//
#include "NcclState.h"

#include <algorithm>
#include <set>

namespace moe::rt::virtual_gpu::nccl {

Communicator::Communicator(std::string name, int rank, int size, bool blocking,
                           MPI_Comm mpi, int pendingPolls)
    : name(std::move(name)), rank(rank), size(size), blocking(blocking),
      mpi(mpi), state_(blocking ? ncclSuccess : ncclInProgress),
      pendingPolls(blocking ? 0 : pendingPolls),
      sends(static_cast<size_t>(size), 0),
      receives(static_cast<size_t>(size), 0) {}

Communicator::~Communicator() {
  // After MPI_Finalize nothing may be freed; the job is over anyway.
  MPI_Comm comm = mpi;
  if (comm != MPI_COMM_NULL && mpiRunning())
    MPI_Comm_free(&comm);
}

uint64_t Communicator::nextCollective() {
  std::lock_guard<std::mutex> lock(mutex);
  return ++collectives;
}

uint64_t Communicator::nextSend(int peer) {
  std::lock_guard<std::mutex> lock(mutex);
  return ++sends[static_cast<size_t>(peer)];
}

uint64_t Communicator::nextReceive(int peer) {
  std::lock_guard<std::mutex> lock(mutex);
  return ++receives[static_cast<size_t>(peer)];
}

int Communicator::nextSplit() {
  std::lock_guard<std::mutex> lock(mutex);
  return ++splits;
}

ncclResult_t Communicator::pollAsyncError() {
  std::lock_guard<std::mutex> lock(mutex);
  if (state_ != ncclInProgress)
    return state_;
  if (pendingPolls > 0) {
    --pendingPolls;
    return ncclInProgress;
  }
  state_ = ncclSuccess;
  return state_;
}

ncclResult_t Communicator::state() const {
  std::lock_guard<std::mutex> lock(mutex);
  return state_;
}

void Communicator::fail(ncclResult_t code, const std::string &full) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (state_ != ncclSuccess && state_ != ncclInProgress)
      return;
    state_ = code;
    message = full;
  }
  reportError(code, full);
}

std::string Communicator::lastError() const {
  std::lock_guard<std::mutex> lock(mutex);
  return message;
}

void Communicator::batchQueued() {
  std::lock_guard<std::mutex> lock(mutex);
  ++batchesInFlight;
}

void Communicator::batchFinished() {
  std::lock_guard<std::mutex> lock(mutex);
  if (--batchesInFlight == 0)
    idle.notify_all();
}

void Communicator::waitForBatches() {
  std::unique_lock<std::mutex> lock(mutex);
  idle.wait(lock, [this] { return batchesInFlight == 0; });
}

namespace {

struct Registry {
  std::mutex mutex;
  std::set<ncclComm_t> live;
};

Registry &registry() {
  static Registry *handles = new Registry();
  return *handles;
}

} // namespace

ncclComm_t registerCommunicator(std::shared_ptr<Communicator> comm) {
  ncclComm_t handle = new ncclComm{std::move(comm)};
  Registry &handles = registry();
  std::lock_guard<std::mutex> lock(handles.mutex);
  handles.live.insert(handle);
  return handle;
}

std::shared_ptr<Communicator> findCommunicator(ncclComm_t handle) {
  Registry &handles = registry();
  std::lock_guard<std::mutex> lock(handles.mutex);
  if (!handles.live.count(handle))
    return nullptr;
  return handle->state;
}

std::shared_ptr<Communicator> unregisterCommunicator(ncclComm_t handle) {
  Registry &handles = registry();
  std::lock_guard<std::mutex> lock(handles.mutex);
  if (!handles.live.erase(handle))
    return nullptr;
  std::shared_ptr<Communicator> comm = std::move(handle->state);
  delete handle;
  return comm;
}

bool mpiRunning() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int processRank() {
  int rank = 0;
  if (mpiRunning())
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

bool isCollective(OpKind kind) {
  return kind == OpKind::AllReduce || kind == OpKind::AllGather ||
         kind == OpKind::ReduceScatter;
}

size_t elementBytes(ncclDataType_t type) {
  switch (type) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

} // namespace moe::rt::virtual_gpu::nccl
