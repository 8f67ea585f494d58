//===- OneRankJob.h - a job of one process for the NCCL tests ---*- C++ -*-===//
//
// What the tests of the NCCL layer start from: a world of one process
// without MPI, its group of everyone and the job's NCCL communicator over
// it, on GPU 0.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_CUDA_ONERANKJOB_H
#define MOE_UNITTESTS_CUDA_ONERANKJOB_H

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cuda/Nccl.h"

#include "absl/status/statusor.h"

#include <memory>

namespace moe::rt::cuda::testing {

/// Members in creation order: each is destroyed before what it was made
/// from.
struct OneRankJob {
  std::unique_ptr<comm::World> world;
  std::unique_ptr<comm::Group> everyone;
  std::unique_ptr<NcclWorld> nccl;
};

/// The job, or the first error (NcclWorld::create's without a GPU).
inline absl::StatusOr<OneRankJob> oneRankJob() {
  OneRankJob job;
  absl::StatusOr<std::unique_ptr<comm::World>> world = comm::World::local();
  if (!world.ok())
    return world.status();
  job.world = std::move(*world);
  absl::StatusOr<std::unique_ptr<comm::Group>> everyone =
      job.world->group(comm::Mesh{}, {});
  if (!everyone.ok())
    return everyone.status();
  job.everyone = std::move(*everyone);
  absl::StatusOr<std::unique_ptr<NcclWorld>> nccl =
      NcclWorld::create(*job.everyone, 0);
  if (!nccl.ok())
    return nccl.status();
  job.nccl = std::move(*nccl);
  return job;
}

} // namespace moe::rt::cuda::testing

#endif // MOE_UNITTESTS_CUDA_ONERANKJOB_H
