//===- World.cpp - the job's processes and the groups of a mesh -----------===//
#include "MpiSupport.h"
#include "RequestState.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/IO/Checksum.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cstdio>
#include <cstdlib>

namespace moe::rt::comm {

static ThreadLevel threadLevelOf(int provided) {
  if (provided >= MPI_THREAD_MULTIPLE)
    return ThreadLevel::Multiple;
  if (provided >= MPI_THREAD_SERIALIZED)
    return ThreadLevel::Serialized;
  if (provided >= MPI_THREAD_FUNNELED)
    return ThreadLevel::Funneled;
  return ThreadLevel::Single;
}

/// The group of every rank in world order.
static std::vector<int64_t> allRanks(int size) {
  std::vector<int64_t> ranks(size);
  for (int r = 0; r < size; ++r)
    ranks[r] = r;
  return ranks;
}

absl::StatusOr<std::unique_ptr<World>> World::init(int *argc, char ***argv) {
  absl::StatusOr<absl::Duration> timeout = timeoutFromEnvironment();
  if (!timeout.ok())
    return timeout.status();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized || finalized)
    return absl::FailedPreconditionError(
        "MPI is already initialised in this process: create one World per "
        "process");
  // MULTIPLE lets any thread communicate; the runtime only needs FUNNELED
  // (compute threads never call MPI), so less than MULTIPLE is accepted and
  // recorded.
  int provided = MPI_THREAD_SINGLE;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
      rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Init_thread");

  std::unique_ptr<World> world(new World());
  world->usesMpi_ = true;
  world->timeout_ = *timeout;
  world->state_ = std::make_shared<detail::WorldState>();
  world->threadLevel_ = threadLevelOf(provided);
  // From here on the destructor finalises MPI, on every error path too.
  if (int rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Comm_set_errhandler");
  if (world->threadLevel_ == ThreadLevel::Single)
    return absl::FailedPreconditionError(
        "this MPI grants only MPI_THREAD_SINGLE; the runtime needs at least "
        "MPI_THREAD_FUNNELED (its compute threads run beside MPI)");
  if (int rc = MPI_Comm_rank(MPI_COMM_WORLD, &world->rank_); rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Comm_rank");
  if (int rc = MPI_Comm_size(MPI_COMM_WORLD, &world->size_); rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Comm_size");
  MPI_Comm internal, probes;
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &internal); rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Comm_dup");
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &probes); rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Comm_dup");
  world->state_->setProber(detail::makeMpiProber(probes));
  world->everyone_.reset(
      new Group(detail::makeMpiTransport(MPI_COMM_WORLD, internal), "world",
                allRanks(world->size_), world->state_, world->timeout_));
  return world;
}

absl::StatusOr<std::unique_ptr<World>> World::local() {
  absl::StatusOr<absl::Duration> timeout = timeoutFromEnvironment();
  if (!timeout.ok())
    return timeout.status();
  std::unique_ptr<World> world(new World());
  world->timeout_ = *timeout;
  world->state_ = std::make_shared<detail::WorldState>();
  world->everyone_.reset(new Group(detail::makeLocalTransport(), "world",
                                   allRanks(1), world->state_,
                                   world->timeout_));
  return world;
}

bool World::startedByLauncher() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                          "SLURM_PROCID", "MPI_LOCALNRANKS"})
    if (std::getenv(var))
      return true;
  return false;
}

absl::StatusOr<std::unique_ptr<World>> World::start(int *argc, char ***argv) {
  return startedByLauncher() ? init(argc, argv) : local();
}

World::~World() {
  if (!usesMpi_ || finalized_)
    return;
  // MPI_Finalize synchronises with every rank, and a rank that is dead or
  // stuck in a collective never arrives: end the job instead of hanging.
  if (state_->broken())
    abort(1);
  if (absl::Status status = finalize(); !status.ok())
    std::fprintf(stderr, "moe comm: %s\n",
                 std::string(status.message()).c_str());
}

bool World::healthy() const { return !state_->broken(); }

std::string World::failure() const { return state_->reason(); }

void World::abort(int exitCode) {
  // MPI_Abort kills the processes without flushing their stdio buffers.
  std::fflush(nullptr);
  int initialized = 0, finalized = 0;
  if (usesMpi_) {
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
  }
  if (initialized && !finalized)
    MPI_Abort(MPI_COMM_WORLD, exitCode);
  std::_Exit(exitCode);
}

absl::Status World::finalize() {
  if (!usesMpi_ || finalized_)
    return absl::OkStatus();
  if (state_->broken())
    return absl::FailedPreconditionError(
        absl::StrCat("not finalising MPI after a communication failure (",
                     state_->reason(), "); abort() the job instead"));
  everyone_.reset();
  finalized_ = true;
  // Groups still alive must not touch MPI any more.
  state_->markBroken(absl::FailedPreconditionError("MPI was finalised"));
  {
    std::lock_guard<std::mutex> lock(state_->progressMutex());
    state_->setProber(nullptr);
  }
  if (int rc = MPI_Finalize(); rc != MPI_SUCCESS)
    return detail::mpiError(rc, "MPI_Finalize");
  return absl::OkStatus();
}

/// A fingerprint of the group a rank asks for.
static uint64_t fingerprint(const std::string &text) {
  return io::fnv1a64(text);
}

absl::StatusOr<std::unique_ptr<Group>>
World::group(const Mesh &mesh, const std::vector<std::string> &axes) {
  if (state_->broken())
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a group: the world can no longer "
                     "communicate (",
                     state_->reason(), ")"));
  if (absl::Status status = mesh.validate(); !status.ok())
    return status;
  if (mesh.size() != size_) {
    if (!usesMpi_)
      return absl::InvalidArgumentError(absl::StrCat(
          "the mesh has ", mesh.size(), " ranks (", mesh.toString(),
          ") but this world is a single process without MPI"));
    return absl::InvalidArgumentError(
        absl::StrCat("the mesh has ", mesh.size(), " ranks (", mesh.toString(),
                     ") but the job has ", size_, ": start it with mpirun -np ",
                     mesh.size()));
  }
  absl::StatusOr<Mesh::GroupPlace> place = mesh.groupPlace(rank_, axes);
  if (!place.ok())
    return place.status();
  std::string name =
      absl::StrCat("{", absl::StrJoin(axes, ","), "} of ", mesh.toString());

  // Splitting the world is a blocking MPI call with no deadline: first make
  // sure (with one) that every rank is here and asks for the same group, so
  // that a diverged program fails with a message instead of a hang.
  uint64_t mine =
      fingerprint(absl::StrCat(mesh.toString(), "|", absl::StrJoin(axes, ",")));
  std::vector<int32_t> ours = {static_cast<int32_t>(mine & 0xffffffffu),
                               static_cast<int32_t>(mine >> 32)};
  std::vector<int32_t> everyones(2 * static_cast<size_t>(size_));
  everyone_->setTimeout(timeout_);
  if (absl::Status status =
          everyone_->allGather(ours, absl::MakeSpan(everyones));
      !status.ok())
    return absl::Status(status.code(), absl::StrCat("creating group ", name,
                                                    ": ", status.message()));
  for (int r = 1; r < size_; ++r)
    if (everyones[2 * r] != everyones[0] ||
        everyones[2 * r + 1] != everyones[1])
      return absl::FailedPreconditionError(absl::StrCat(
          "creating group ", name, ": world rank ", r,
          " asked for a different mesh or axes than world rank 0; every rank "
          "must create the same groups in the same order"));

  std::unique_ptr<detail::Transport> transport;
  if (place->members.size() == 1) {
    transport = detail::makeLocalTransport();
  } else {
    // color: which group; key: the rank inside it (see Mesh::groupPlace).
    MPI_Comm comm, internal;
    auto failed = [&](int rc, const char *call) {
      absl::Status status = detail::mpiError(rc, call);
      status =
          absl::Status(status.code(), absl::StrCat("creating group ", name,
                                                   ": ", status.message()));
      state_->markBroken(status);
      return status;
    };
    if (int rc = MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(place->color),
                                static_cast<int>(place->key), &comm);
        rc != MPI_SUCCESS)
      return failed(rc, "MPI_Comm_split");
    if (int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        rc != MPI_SUCCESS)
      return failed(rc, "MPI_Comm_set_errhandler");
    if (int rc = MPI_Comm_dup(comm, &internal); rc != MPI_SUCCESS)
      return failed(rc, "MPI_Comm_dup");
    transport = detail::makeMpiTransport(comm, internal);
    if (transport->rank() != place->key ||
        transport->size() != static_cast<int>(place->members.size()))
      return absl::InternalError(absl::StrCat(
          "creating group ", name, ": MPI made this rank ", transport->rank(),
          " of ", transport->size(), ", the mesh says ", place->key, " of ",
          place->members.size()));
  }
  return std::unique_ptr<Group>(new Group(std::move(transport), std::move(name),
                                          std::move(place->members), state_,
                                          timeout_));
}

} // namespace moe::rt::comm
