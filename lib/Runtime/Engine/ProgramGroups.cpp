//===- ProgramGroups.cpp - a program's communication groups ---------------===//
#include "moe/Runtime/Engine/ProgramGroups.h"

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moe::rt::engine {

absl::Status checkJobSize(const Program &program, const comm::World *world) {
  // Each rank runs its own part of the step; another number of processes
  // would leave blocks of the weights and rows of the batch to nobody, or
  // train the same ones twice.
  int64_t ranks = program.numRanks();
  int64_t processes = world ? world->size() : 1;
  if (ranks == processes)
    return absl::OkStatus();
  if (ranks == 1)
    return absl::FailedPreconditionError(absl::StrCat(
        "the artifact is not partitioned (it runs on 1 rank), this job has ",
        processes, ": compile it with moec --mesh for ", processes,
        " ranks, or start it without mpirun"));
  return absl::FailedPreconditionError(
      absl::StrCat("the artifact is partitioned over ", ranks, " ranks (",
                   program.meshDescription(), "), this job has ", processes,
                   ": start it with mpirun -np ", ranks));
}

absl::StatusOr<comm::World *> jobWorldOf(comm::World *given,
                                         std::unique_ptr<comm::World> &local) {
  if (given)
    return given;
  absl::StatusOr<std::unique_ptr<comm::World>> created = comm::World::local();
  if (!created.ok())
    return created.status();
  local = std::move(*created);
  return local.get();
}

absl::StatusOr<std::vector<std::unique_ptr<comm::Group>>>
createProgramGroups(const Program &program, comm::World &world) {
  std::vector<std::unique_ptr<comm::Group>> groups;
  comm::Mesh mesh{program.meshAxes, program.meshShape};
  for (size_t g = 0; g < program.groups.size(); ++g) {
    absl::StatusOr<std::unique_ptr<comm::Group>> group =
        world.group(mesh, program.groups[g]);
    if (!group.ok())
      return absl::Status(group.status().code(),
                          absl::StrCat("executor: cannot create group ", g,
                                       " {",
                                       absl::StrJoin(program.groups[g], ","),
                                       "}: ", group.status().message()));
    groups.push_back(std::move(*group));
  }
  return groups;
}

} // namespace moe::rt::engine
