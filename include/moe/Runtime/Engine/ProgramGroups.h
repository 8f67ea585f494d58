//===- ProgramGroups.h - a program's communication groups -------*- C++ -*-===//
//
// What every backend does before a partitioned step can run: check that the
// job has the program's number of ranks, and create one comm::Group per
// program group (Program.groups), a collective call of every rank.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_PROGRAMGROUPS_H
#define MOE_RUNTIME_ENGINE_PROGRAMGROUPS_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <memory>
#include <vector>

namespace moe::rt::comm {
class Group;
class World;
} // namespace moe::rt::comm

namespace moe::rt::engine {

/// OK when a job of `world`'s processes (1 without a world) runs `program`;
/// otherwise says how to start or compile it.
absl::Status checkJobSize(const Program &program, const comm::World *world);

/// The job's world: `given`, or without one a new world of one, kept in
/// `local` (which must outlive the groups created from it).
absl::StatusOr<comm::World *> jobWorldOf(comm::World *given,
                                         std::unique_ptr<comm::World> &local);

/// One group per program group, by index.
absl::StatusOr<std::vector<std::unique_ptr<comm::Group>>>
createProgramGroups(const Program &program, comm::World &world);

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_PROGRAMGROUPS_H
