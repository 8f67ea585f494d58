//===- MeshChecks.h - a partitioned step checked ----------------*- C++ -*-===//
//
// Runs testing::makeMeshProgram on this rank of a world and checks every
// collective, grouped reduction and split initialisation against what the
// single-rank kernels compute on the whole tensors and the global batch.
// Shared by the one-process executor tests (no world, a 1 x 1 mesh) and the
// MPI test binary (every dp x tp mesh of its world).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_ENGINE_MESHCHECKS_H
#define MOE_UNITTESTS_ENGINE_MESHCHECKS_H

#include "TestProgram.h"

namespace moe::rt::comm {
class World;
} // namespace moe::rt::comm

namespace moe::rt::testing {

/// Checks one step of makeMeshProgram(config) on this rank of `world`
/// (nullptr: the only rank, for a 1 x 1 mesh) with gtest expectations.
/// Collective over the world: every rank must call it with the same config.
void checkMeshStep(const MeshConfig &config, comm::World *world);

} // namespace moe::rt::testing

#endif // MOE_UNITTESTS_ENGINE_MESHCHECKS_H
