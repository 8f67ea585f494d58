//===- NcclTest.cpp - NCCL communicators without a GPU --------------------===//
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cuda/Device.h"
#include "moe/Runtime/Cuda/Nccl.h"

#include "OneRankJob.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::rt::cuda {
namespace {

using ::testing::HasSubstr;

// Without a GPU, creating the job's communicator fails with the reason;
// it neither crashes nor waits for peers.
TEST(NcclTest, WithoutADeviceCreationFailsCleanly) {
  if (listDevices().ok())
    GTEST_SKIP() << "a CUDA device is present";
  absl::StatusOr<testing::OneRankJob> job = testing::oneRankJob();
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(),
              ::testing::AnyOf(HasSubstr("cudaSetDevice"),
                               HasSubstr("ncclCommInitRank")));
}

TEST(NcclTest, ErrorsNameTheCallAndNccl) {
  absl::Status status = ncclStatus(ncclInvalidArgument, "ncclAllReduce");
  EXPECT_THAT(status.message(), HasSubstr("ncclAllReduce: "));
  EXPECT_TRUE(ncclStatus(ncclSuccess, "ncclAllReduce").ok());
}

} // namespace
} // namespace moe::rt::cuda
