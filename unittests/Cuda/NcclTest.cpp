//===- NcclTest.cpp - NCCL communicators without a GPU --------------------===//
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cuda/Device.h"
#include "moe/Runtime/Cuda/Nccl.h"

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
  absl::StatusOr<std::unique_ptr<comm::World>> world = comm::World::local();
  ASSERT_TRUE(world.ok()) << world.status();
  absl::StatusOr<std::unique_ptr<comm::Group>> everyone =
      (*world)->group(comm::Mesh{}, {});
  ASSERT_TRUE(everyone.ok()) << everyone.status();
  absl::StatusOr<std::unique_ptr<NcclWorld>> nccl =
      NcclWorld::create(**everyone, 0);
  ASSERT_FALSE(nccl.ok());
  EXPECT_THAT(nccl.status().message(),
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
