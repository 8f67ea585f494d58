//===- MeshExecutorTest.cpp - partitioned steps on the ranks of a job -----===//
//
// An MPI program: started without mpirun (as ctest does) it is a world of
// one and checks the 1 x 1 mesh; test/moe-run/mesh-executor.test starts it
// under mpirun with 2 and 4 ranks, where every dp x tp mesh of the world
// runs makeMeshProgram and each rank checks its part against single-rank
// kernels on the whole tensors (MeshChecks.cpp), and every dp x ep mesh
// runs makeExpertParallelProgram against the kernels on each expert group's
// tokens (ExpertParallelChecks.cpp). Only rank 0 prints the full report;
// the others print failures only.
//
//===----------------------------------------------------------------------===//

#include "ExpertParallelChecks.h"
#include "MeshChecks.h"

#include "moe/Runtime/Comm/Communicator.h"

#include "gtest/gtest.h"

#include <cstdio>

namespace moe::rt {
namespace {

comm::World *world = nullptr;

TEST(MeshExecutorTest, EveryMeshOfTheWorld) {
  int64_t ranks = world->size();
  // tp must divide the vocabulary (8) that the table is split along.
  for (int64_t tp = 1; tp <= ranks; ++tp)
    if (ranks % tp == 0 && testing::MeshProgramSizes::kVocab % tp == 0)
      testing::checkMeshStep({ranks / tp, tp}, world);
}

TEST(MeshExecutorTest, ExpertParallelOverEveryMesh) {
  int64_t ranks = world->size();
  for (int64_t ep = 1; ep <= ranks; ++ep) {
    if (ranks % ep != 0)
      continue;
    int64_t dp = ranks / ep;
    // Top-3 of 3 experts per rank; top-2 of 2 per rank with slots dropped
    // by capacity; BF16 rows (moving as BF16 both ways).
    testing::checkExpertParallelStep({dp, ep, 3, 3}, world);
    testing::checkExpertParallelStep({dp, ep, 2, 2, 0.5f}, world);
    testing::checkExpertParallelStep({dp, ep, 3, 3, 0.0f, /*bf16=*/true},
                                     world);
    testing::checkExpertParallelBadIds({dp, ep, 2, 2}, world);
    testing::checkFp8AmaxHistoryCopies({dp, ep, 3, 3}, world);
  }
}

} // namespace
} // namespace moe::rt

int main(int argc, char **argv) {
  absl::StatusOr<std::unique_ptr<moe::rt::comm::World>> world =
      moe::rt::comm::World::start(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "EngineMeshTests: %s\n",
                 std::string(world.status().message()).c_str());
    return 1;
  }
  moe::rt::world = world->get();
  ::testing::InitGoogleTest(&argc, argv);
  if ((*world)->rank() != 0)
    GTEST_FLAG_SET(brief, true);
  return RUN_ALL_TESTS();
}
