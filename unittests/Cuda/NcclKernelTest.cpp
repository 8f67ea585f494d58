//===- NcclKernelTest.cpp - NCCL collectives on one GPU -------------------===//
//
// A job of one rank: its groups are groups of one, so every collective is
// the identity (or a copy) — which checks the plumbing: the unique id over
// MPI, the split, the counts of the row all-to-all. test/gpu covers more
// ranks where a machine has more GPUs.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"
#include "OneRankJob.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cuda/Nccl.h"

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

TEST(NcclKernelTest, GroupsOfOneRank) {
  absl::StatusOr<testing::OneRankJob> job = testing::oneRankJob();
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<NcclGroup>> group =
      job->nccl->split(*job->everyone);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->size(), 1);

  std::vector<float> values = randomValues(1000, 1);
  DeviceArray<float> data(values), gathered(1000), scattered(1000), rows(1000);
  ASSERT_TRUE((*group)->allReduceSum(data.get(), 1000, nullptr).ok());
  expectClose(data.read(), values, 0.0f, 0.0f, "all-reduce");
  ASSERT_TRUE((*group)->allGather(data.get(), gathered.get(), 1000, nullptr).ok());
  expectClose(gathered.read(), values, 0.0f, 0.0f, "all-gather");
  ASSERT_TRUE(
      (*group)->reduceScatterSum(data.get(), scattered.get(), 1000, nullptr).ok());
  expectClose(scattered.read(), values, 0.0f, 0.0f, "reduce-scatter");
  ASSERT_TRUE((*group)
                  ->allToAllRows(data.get(), {100}, rows.get(), {100}, 10,
                                 nullptr)
                  .ok());
  expectClose(rows.read(), values, 0.0f, 0.0f, "all-to-all");
  EXPECT_FALSE(
      (*group)->allToAllRows(data.get(), {1, 2}, rows.get(), {1}, 10, nullptr)
          .ok());
}

// A group with a reductions lane has a second communicator of its ranks,
// which reduces on a stream of its own while the first stays usable.
TEST(NcclKernelTest, ReductionLaneIsASecondCommunicator) {
  absl::StatusOr<testing::OneRankJob> job = testing::oneRankJob();
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<NcclGroup>> plain =
      job->nccl->split(*job->everyone);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(&(*plain)->forReductions(), plain->get());
  absl::StatusOr<std::unique_ptr<NcclGroup>> laned =
      job->nccl->split(*job->everyone, /*reductionLane=*/true);
  ASSERT_TRUE(laned.ok()) << laned.status();
  NcclGroup &reductions = (*laned)->forReductions();
  EXPECT_NE(&reductions, laned->get());
  EXPECT_EQ(reductions.size(), 1);

  cudaStream_t lane = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&lane, cudaStreamNonBlocking),
            cudaSuccess);
  std::vector<float> values = randomValues(1000, 2);
  DeviceArray<float> summed(values), gathered(1000);
  ASSERT_TRUE(reductions.allReduceSum(summed.get(), 1000, lane).ok());
  ASSERT_EQ(cudaStreamSynchronize(lane), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(lane), cudaSuccess);
  expectClose(summed.read(), values, 0.0f, 0.0f, "all-reduce on the lane");
  ASSERT_TRUE(
      (*laned)->allGather(summed.get(), gathered.get(), 1000, nullptr).ok());
  expectClose(gathered.read(), values, 0.0f, 0.0f, "all-gather beside it");
}

} // namespace
} // namespace moe::rt::cuda
