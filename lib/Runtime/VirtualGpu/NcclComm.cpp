//===- NcclComm.cpp - NCCL communicators over the job's MPI ---------------===//
//
// ncclGetUniqueId, ncclCommInitRankConfig, ncclCommSplit, ncclCommDestroy,
// ncclCommAbort and ncclCommGetAsyncError for the virtual GPU.
//
// A communicator of one rank needs nothing but its id. One of several ranks
// must span the whole MPI job (the backend's world communicator does): its
// ranks meet in an MPI_Comm_split of MPI_COMM_WORLD ordered by NCCL rank,
// and check they all hold the same id. Fewer ranks come from ncclCommSplit,
// an MPI_Comm_split of the parent's communicator. Both wait for the other
// ranks inside the call; a non-blocking one (config.blocking = 0) then
// still answers ncclInProgress, and ncclCommGetAsyncError does too as many
// more times as MOE_VIRTUAL_GPU_NCCL_FAULTS's in-progress asks (NcclFaults.h),
// so that the backend's polling is exercised on every run.
//
//===----------------------------------------------------------------------===//
#include "NcclFaults.h"
#include "NcclState.h"

#include "Comm/MpiSupport.h"

#include "absl/strings/str_cat.h"

#include <atomic>
#include <cstring>

using namespace moe::rt::virtual_gpu::nccl;

namespace {

/// What ncclGetUniqueId writes into an id: who made it, and its number
/// there, which also name the communicator ("comm 0:1").
struct IdContents {
  char magic[8];
  int32_t creator;
  uint32_t serial;
};
static_assert(sizeof(IdContents) <= sizeof(ncclUniqueId));

constexpr char kIdMagic[8] = "moevgpu";

/// The magic ncclConfig_t's NCCL_CONFIG_INITIALIZER sets.
constexpr unsigned kConfigMagic = 0xcafebeef;

/// Reads `config` (null: the defaults): whether the communicator blocks
/// (`blocking` holds the default) and its commName, if any.
ncclResult_t readConfig(const char *call, const ncclConfig_t *config,
                        bool &blocking, std::string &name) {
  if (!config)
    return ncclSuccess;
  if (config->magic != kConfigMagic)
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": the config was not initialised "
                                          "with NCCL_CONFIG_INITIALIZER"));
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return reportError(ncclInvalidArgument,
                         absl::StrCat(call, ": config.blocking is ",
                                      config->blocking, ", not 0 or 1"));
    blocking = config->blocking == 1;
  }
  if (config->commName)
    name = config->commName;
  return ncclSuccess;
}

ncclResult_t faultsReadable(const char *call) {
  if (absl::Status status = reloadFaults(); !status.ok())
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": ", status.message()));
  return ncclSuccess;
}

ncclResult_t mpiFailed(int rc, const std::string &what) {
  absl::Status status = moe::rt::comm::detail::mpiError(rc, what.c_str());
  return reportError(ncclSystemError, std::string(status.message()));
}

/// What each rank brings to a communicator of several.
struct Joining {
  IdContents id;
  int32_t rank;
  int32_t ranks;
};

/// Checks that every rank of `mpi` joined with `mine`'s id and size and a
/// rank of its own; the same verdict on every rank.
ncclResult_t checkJoined(MPI_Comm mpi, const Joining &mine,
                         const std::string &name) {
  const char *call = "ncclCommInitRankConfig";
  std::vector<Joining> all(static_cast<size_t>(mine.ranks));
  if (int rc = MPI_Allgather(&mine, sizeof(Joining), MPI_BYTE, all.data(),
                             sizeof(Joining), MPI_BYTE, mpi);
      rc != MPI_SUCCESS)
    return mpiFailed(rc, absl::StrCat(call, " of ", name, ": MPI_Allgather"));
  for (size_t i = 0; i < all.size(); ++i) {
    const Joining &j = all[i];
    if (std::memcmp(&j.id, &mine.id, sizeof(IdContents)) != 0 ||
        j.ranks != mine.ranks)
      return reportError(
          ncclInvalidUsage,
          absl::StrCat(call, " of ", name, ": rank ", j.rank,
                       " joined with another unique id or size (", j.ranks,
                       " ranks)"));
    // Ordered by NCCL rank, a rank claimed twice leaves a gap.
    if (j.rank != static_cast<int32_t>(i))
      return reportError(
          ncclInvalidUsage,
          absl::StrCat(call, " of ", name, ": rank ", j.rank, " joined twice"));
  }
  return ncclSuccess;
}

/// An MPI communicator of every rank of the job, ordered by NCCL rank.
ncclResult_t joinOverMpi(const IdContents &id, int nranks, int rank,
                         const std::string &name, MPI_Comm &mpi) {
  const char *call = "ncclCommInitRankConfig";
  if (!mpiRunning())
    return reportError(
        ncclInvalidUsage,
        absl::StrCat(call, ": ", name, " of ", nranks,
                     " ranks, but MPI is not initialised: without MPI the "
                     "virtual GPU makes communicators of one rank"));
  int threads = MPI_THREAD_SINGLE, worldSize = 0;
  MPI_Query_thread(&threads);
  if (threads < MPI_THREAD_MULTIPLE)
    return reportError(ncclInvalidUsage,
                       absl::StrCat(call, ": ", name,
                                    ": MPI was initialised without "
                                    "MPI_THREAD_MULTIPLE, which the "
                                    "virtual GPU's streams need"));
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  if (worldSize != nranks)
    return reportError(
        ncclInvalidUsage,
        absl::StrCat(call, ": ", name, " of ", nranks, " ranks in a job of ",
                     worldSize,
                     ": the virtual GPU makes communicators of one rank or of "
                     "the whole job; ncclCommSplit makes the others"));
  if (int rc = MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mpi); rc != MPI_SUCCESS)
    return mpiFailed(rc, absl::StrCat(call, " of ", name, ": MPI_Comm_split"));
  MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  ncclResult_t joined = checkJoined(mpi, {id, rank, nranks}, name);
  if (joined != ncclSuccess)
    MPI_Comm_free(&mpi);
  return joined;
}

ncclResult_t unknownComm(const char *call) {
  return reportError(ncclInvalidArgument,
                     absl::StrCat(call, ": not a live communicator (null, "
                                        "destroyed, aborted or never made)"));
}

} // namespace

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId)
    return reportError(ncclInvalidArgument, "ncclGetUniqueId: the id is null");
  static std::atomic<uint32_t> serials{0};
  IdContents contents;
  std::memcpy(contents.magic, kIdMagic, sizeof(kIdMagic));
  contents.creator = processRank();
  contents.serial = ++serials;
  std::memset(uniqueId, 0, sizeof(ncclUniqueId));
  std::memcpy(uniqueId, &contents, sizeof(contents));
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                               ncclUniqueId commId, int rank,
                                               ncclConfig_t *config) {
  const char *call = "ncclCommInitRankConfig";
  if (!comm)
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": the communicator is null"));
  *comm = nullptr;
  bool blocking = true;
  std::string name;
  if (ncclResult_t read = readConfig(call, config, blocking, name);
      read != ncclSuccess)
    return read;
  IdContents id;
  std::memcpy(&id, &commId, sizeof(id));
  if (std::memcmp(id.magic, kIdMagic, sizeof(kIdMagic)) != 0)
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": the unique id was not made by "
                                          "ncclGetUniqueId"));
  if (name.empty())
    name = absl::StrCat("comm ", id.creator, ":", id.serial);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": ", name, ": rank ", rank, " of ",
                                    nranks, " ranks"));
  if (ncclResult_t read = faultsReadable(call); read != ncclSuccess)
    return read;
  MPI_Comm mpi = MPI_COMM_NULL;
  if (nranks > 1)
    if (ncclResult_t joined = joinOverMpi(id, nranks, rank, name, mpi);
        joined != ncclSuccess)
      return joined;
  *comm = registerCommunicator(std::make_shared<Communicator>(
      name, rank, nranks, blocking, mpi, extraInProgressPolls()));
  return blocking ? ncclSuccess : ncclInProgress;
}

extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                      ncclComm_t *newcomm,
                                      ncclConfig_t *config) {
  const char *call = "ncclCommSplit";
  std::shared_ptr<Communicator> parent = findCommunicator(comm);
  if (!parent)
    return unknownComm(call);
  if (!newcomm)
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": the new communicator is null"));
  *newcomm = nullptr;
  ncclResult_t state = parent->state();
  if (state == ncclInProgress)
    return reportError(
        ncclInvalidUsage,
        absl::StrCat(call, ": ", parent->name,
                     " is still being made: poll ncclCommGetAsyncError until "
                     "it is no longer ncclInProgress"));
  if (state != ncclSuccess)
    return reportError(state,
                       absl::StrCat(call, ": ", parent->name,
                                    " has failed: ", parent->lastError()));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return reportError(ncclInvalidArgument,
                       absl::StrCat(call, ": ", parent->name, ": colour ",
                                    color, " is negative"));
  bool blocking = parent->blocking;
  std::string name;
  if (ncclResult_t read = readConfig(call, config, blocking, name);
      read != ncclSuccess)
    return read;
  if (ncclResult_t read = faultsReadable(call); read != ncclSuccess)
    return read;
  // Every rank of the parent splits, so every rank numbers the splits alike.
  int split = parent->nextSplit();
  if (name.empty())
    name = absl::StrCat(parent->name, "/", split);
  int rank = 0, size = 1;
  MPI_Comm mpi = MPI_COMM_NULL;
  if (parent->mpi != MPI_COMM_NULL) {
    int rc = MPI_Comm_split(parent->mpi,
                            color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color,
                            key, &mpi);
    if (rc != MPI_SUCCESS)
      return mpiFailed(
          rc, absl::StrCat(call, " of ", parent->name, ": MPI_Comm_split"));
    if (mpi != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
      MPI_Comm_rank(mpi, &rank);
      MPI_Comm_size(mpi, &size);
    }
  }
  if (color == NCCL_SPLIT_NOCOLOR)
    return ncclSuccess;
  *newcomm = registerCommunicator(std::make_shared<Communicator>(
      name, rank, size, blocking, mpi, extraInProgressPolls()));
  return blocking ? ncclSuccess : ncclInProgress;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::shared_ptr<Communicator> state = unregisterCommunicator(comm);
  if (!state)
    return unknownComm("ncclCommDestroy");
  // Its queued operations finish first, as NCCL's do.
  state->waitForBatches();
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  std::shared_ptr<Communicator> state = unregisterCommunicator(comm);
  if (!state)
    return unknownComm("ncclCommAbort");
  // Its work ends at its next poll and frees the rest with the last
  // reference; nothing here waits for a peer.
  state->abort();
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                              ncclResult_t *asyncError) {
  std::shared_ptr<Communicator> state = findCommunicator(comm);
  if (!state)
    return unknownComm("ncclCommGetAsyncError");
  if (!asyncError)
    return reportError(ncclInvalidArgument,
                       "ncclCommGetAsyncError: the result pointer is null");
  *asyncError = state->pollAsyncError();
  return ncclSuccess;
}
