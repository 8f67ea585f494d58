//===- CollectiveWatchTest.cpp - NCCL deadlines without a GPU -------------===//
//
// The watch's logic with its CUDA and NCCL calls replaced: markers that a
// test reaches by hand, a clock it moves, and counted aborts.
//
//===----------------------------------------------------------------------===//
#include "../../lib/Runtime/Cuda/CollectiveWatch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <set>

namespace moe::rt::cuda {
namespace {

using ::testing::HasSubstr;

/// Markers are ints; `reached` holds those whose collective completed.
struct FakeCuda {
  std::set<int> reached, released;
  absl::Status asyncError;
  absl::Status queryError;
  int aborts = 0;
  absl::Time now = absl::UnixEpoch();
  /// Each pause of a wait moves the clock by this much.
  absl::Duration step = absl::Seconds(1);

  static void *marker(int id) { return reinterpret_cast<void *>(intptr_t(id)); }

  CollectiveWatch::Hooks hooks() {
    CollectiveWatch::Hooks h;
    h.reached = [this](void *m) -> absl::StatusOr<bool> {
      if (!queryError.ok())
        return queryError;
      return reached.count(int(reinterpret_cast<intptr_t>(m))) > 0;
    };
    h.release = [this](void *m) {
      released.insert(int(reinterpret_cast<intptr_t>(m)));
    };
    h.asyncError = [this] { return asyncError; };
    h.abortAll = [this] { ++aborts; };
    h.now = [this] { return now; };
    h.pause = [this] { now += step; };
    return h;
  }
};

TEST(CollectiveWatchTest, CompletedCollectivesAreForgotten) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(10));
  watch.enqueued("ncclAllReduce (sum) of 8 float32 on group {dp}",
                 FakeCuda::marker(1));
  watch.enqueued("ncclAllGather of 8 float32 on group {tp}",
                 FakeCuda::marker(2));
  // The second stream's collective may finish first.
  cuda.reached.insert(2);
  EXPECT_TRUE(watch.check().ok());
  EXPECT_EQ(cuda.released, std::set<int>({2}));
  cuda.reached.insert(1);
  cuda.now += absl::Seconds(60);
  EXPECT_TRUE(watch.check().ok());
  EXPECT_EQ(cuda.released, std::set<int>({1, 2}));
  EXPECT_EQ(cuda.aborts, 0);
}

TEST(CollectiveWatchTest, ACollectivePastItsDeadlineAbortsAndIsNamed) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(10));
  watch.enqueued(
      "ncclReduceScatter of 64 float32 on group {dp} (world ranks 0, 1)",
      FakeCuda::marker(7));
  cuda.now += absl::Seconds(9);
  EXPECT_TRUE(watch.check().ok());
  cuda.now += absl::Seconds(2);
  absl::Status late = watch.check();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.message(),
              HasSubstr("ncclReduceScatter of 64 float32 on group {dp} "
                        "(world ranks 0, 1) did not complete"));
  EXPECT_THAT(late.message(), HasSubstr("MOE_COMM_TIMEOUT_S"));
  EXPECT_EQ(cuda.aborts, 1);
  EXPECT_TRUE(watch.aborted());
  EXPECT_EQ(cuda.released, std::set<int>({7}));
  // The failure stays, and nothing is aborted twice.
  EXPECT_EQ(watch.check(), late);
  EXPECT_EQ(cuda.aborts, 1);
}

TEST(CollectiveWatchTest, AnAsyncErrorAbortsAndNamesTheCollectiveInFlight) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(10));
  watch.enqueued("ncclAllGather of 4 bytes on group {ep}", FakeCuda::marker(3));
  cuda.asyncError = absl::FailedPreconditionError(
      "ncclCommGetAsyncError: remote process exited or there was a network "
      "error");
  absl::Status failed = watch.check();
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.message(),
              HasSubstr("during ncclAllGather of 4 bytes on group {ep}"));
  EXPECT_THAT(failed.message(), HasSubstr("remote process exited"));
  EXPECT_EQ(cuda.aborts, 1);
}

TEST(CollectiveWatchTest, AWaitEndsWhenDoneOrAtTheDeadline) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(5));
  int polls = 0;
  EXPECT_TRUE(
      watch.waitUntil([&]() -> absl::StatusOr<bool> { return ++polls == 3; })
          .ok());
  EXPECT_EQ(polls, 3);

  // A stream that never drains behind a collective that never completes:
  // the wait ends at the collective's deadline instead of hanging.
  watch.enqueued("ncclAllReduce (sum) of 1 float32 on group {dp}",
                 FakeCuda::marker(9));
  absl::Status stuck =
      watch.waitUntil([]() -> absl::StatusOr<bool> { return false; });
  EXPECT_EQ(stuck.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cuda.aborts, 1);
  EXPECT_GE(cuda.now - absl::UnixEpoch(), absl::Seconds(5));
}

// After the abort, a failed wait still waits for its stream: the work
// queued behind the aborted collective (a copy into host memory that the
// caller frees on the error) runs once the abort ends the collective, and
// must be done when the wait returns. Found by the virtual GPU
// (test/virtual-gpu/mesh-faults.test: a chunked expert exchange's host
// tables written after they were freed).
TEST(CollectiveWatchTest, AFailedWaitReturnsOnceItsStreamDrained) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(5));
  watch.enqueued("ncclAllReduce (sum) of 1 float32 on group {dp}",
                 FakeCuda::marker(3));
  bool aborted = false;
  int pollsAfterAbort = 0;
  // The stream drains on the third poll after the abort.
  absl::Status failed = watch.waitUntil([&]() -> absl::StatusOr<bool> {
    aborted = aborted || cuda.aborts > 0;
    return aborted && ++pollsAfterAbort == 3;
  });
  EXPECT_EQ(failed.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(pollsAfterAbort, 3);
  EXPECT_THAT(failed.message(), ::testing::Not(HasSubstr("did not drain")));

  // Later waits fail at once with the same error, once drained too.
  int polls = 0;
  absl::Status again =
      watch.waitUntil([&]() -> absl::StatusOr<bool> { return ++polls == 2; });
  EXPECT_EQ(again, failed);
  EXPECT_EQ(polls, 2);
  EXPECT_EQ(cuda.aborts, 1);
}

// A stream that does not drain after the abort ends the wait another
// deadline later, saying so.
TEST(CollectiveWatchTest, AFailedWaitOnAStuckStreamEndsAtASecondDeadline) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(5));
  watch.enqueued("ncclAllGather of 4 bytes on group {ep}", FakeCuda::marker(5));
  absl::Status stuck =
      watch.waitUntil([]() -> absl::StatusOr<bool> { return false; });
  EXPECT_EQ(stuck.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(stuck.message(),
              HasSubstr("ncclAllGather of 4 bytes on group {ep} did not "
                        "complete"));
  EXPECT_THAT(stuck.message(),
              HasSubstr("; the stream did not drain within 5.0 s of the "
                        "abort"));
  EXPECT_GE(cuda.now - absl::UnixEpoch(), absl::Seconds(10));
}

TEST(CollectiveWatchTest, AFailedQueryAbortsNamingTheCollective) {
  FakeCuda cuda;
  CollectiveWatch watch(cuda.hooks(), absl::Seconds(5));
  watch.enqueued("ncclAllGather of 2 float32 on group {tp}",
                 FakeCuda::marker(4));
  cuda.queryError = absl::InternalError("cudaErrorLaunchFailure");
  absl::Status failed = watch.check();
  EXPECT_THAT(failed.message(),
              HasSubstr("ncclAllGather of 2 float32 on group {tp}: "
                        "cudaErrorLaunchFailure"));
  EXPECT_EQ(cuda.aborts, 1);
}

} // namespace
} // namespace moe::rt::cuda
