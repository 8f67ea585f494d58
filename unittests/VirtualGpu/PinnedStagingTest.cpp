//===- PinnedStagingTest.cpp - the CUDA backend's pinned reads ------------===//
//
// lib/Runtime/Cuda/PinnedStaging.h on the virtual GPU, whose copies into
// pageable host memory return only once they ran: a read behind a hung
// collective must still let the CollectiveWatch poll, end with its error,
// and keep the late copy out of the caller's memory.
//
//===----------------------------------------------------------------------===//
#include "PinnedStaging.h"

#include "VirtualGpu/Runtime.h"

#include "absl/synchronization/notification.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace moe::rt::cuda {
namespace {

class PinnedStagingTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(virtual_gpu::selectDevice("h100").ok());
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }

  cudaStream_t stream = nullptr;
};

TEST_F(PinnedStagingTest, ReadsGoThroughAGrowingBufferInPieces) {
  const size_t bytes = 2 * PinnedStaging::kMaxStagingBytes + 100;
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i)
    pattern[i] = static_cast<uint8_t>(i * 31 + i / 4096);
  void *device;
  ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, pattern.data(), bytes,
                            cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  PinnedStaging staging;
  EXPECT_EQ(staging.capacity(), 0u);
  uint8_t first = 0;
  ASSERT_TRUE(staging.read(&first, device, 1, stream, nullptr).ok());
  EXPECT_EQ(first, pattern[0]);
  EXPECT_EQ(staging.capacity(), PinnedStaging::kFirstStagingBytes);
  std::vector<uint8_t> all(bytes);
  ASSERT_TRUE(staging.read(all.data(), device, bytes, stream, nullptr).ok());
  EXPECT_EQ(all, pattern);
  EXPECT_EQ(staging.capacity(), PinnedStaging::kMaxStagingBytes);
  EXPECT_FALSE(staging.abandonedAny());
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

TEST_F(PinnedStagingTest, AReadBehindAHungCollectiveEndsWithTheWatchsError) {
  void *device;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 7, 64, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  // The collective spins until ncclCommAbort, which only the watch calls:
  // a read that blocked inside cudaMemcpyAsync would never return.
  auto ended = std::make_shared<absl::Notification>();
  ASSERT_EQ(virtual_gpu::enqueue(stream, "hung collective",
                                 [ended] { ended->WaitForNotification(); }),
            cudaSuccess);
  // Each look at the clock is a second later: the deadline passes after a
  // few polls, whatever the machine's speed.
  absl::Time clock = absl::UnixEpoch();
  CollectiveWatch::Hooks hooks;
  hooks.reached = [ended](void *) -> absl::StatusOr<bool> {
    return ended->HasBeenNotified();
  };
  hooks.release = [](void *) {};
  hooks.asyncError = [] { return absl::OkStatus(); };
  hooks.abortAll = [ended] {
    if (!ended->HasBeenNotified())
      ended->Notify();
  };
  hooks.now = [&clock] { return clock += absl::Seconds(1); };
  hooks.pause = [] { std::this_thread::yield(); };
  CollectiveWatch watch(hooks, absl::Seconds(10));
  watch.enqueued("ncclAllReduce of 16 float on group {dp}", ended.get());

  PinnedStaging staging;
  std::vector<uint8_t> host(64, 0x11);
  absl::Status status = staging.read(host.data(), device, 64, stream, &watch);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              ::testing::HasSubstr("ncclAllReduce of 16 float on group {dp} "
                                   "did not complete"));
  EXPECT_TRUE(watch.aborted());
  // The copy ran after the abort, into the abandoned buffer.
  EXPECT_EQ(host, std::vector<uint8_t>(64, 0x11));
  EXPECT_TRUE(staging.abandonedAny());
  EXPECT_EQ(staging.capacity(), 0u);
  // A later read takes a fresh buffer.
  ASSERT_TRUE(staging.read(host.data(), device, 64, stream, nullptr).ok());
  EXPECT_EQ(host, std::vector<uint8_t>(64, 7));
  EXPECT_EQ(staging.capacity(), PinnedStaging::kFirstStagingBytes);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

} // namespace
} // namespace moe::rt::cuda
