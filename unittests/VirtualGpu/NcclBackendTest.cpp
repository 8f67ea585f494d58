//===- NcclBackendTest.cpp - the CUDA backend's NCCL on the virtual GPU ---===//
//
// An MPI program: test/virtual-gpu/nccl-backend.test starts it under
// mpirun with 2 and 4 ranks; started alone (as ctest does) it is a world of
// one. The backend's own NcclWorld and NcclGroup (lib/Runtime/Cuda/Nccl.cpp),
// unchanged, on the emulated NCCL: the world communicator and a group's
// split with its reductions lane, every sum the backend makes (fp32 by
// NCCL, BF16 and doubles gathered and added by its kernels in rank order),
// the expert all-to-all, and a rank that never arrives, which the backend's
// watch must end at its deadline with the error it prints.
//
//===----------------------------------------------------------------------===//
#include "NcclTesting.h"

#include "CollectiveWatch.h"
#include "VirtualGpu/Runtime.h"

#include "moe/Runtime/Cuda/Nccl.h"
#include "moe/Runtime/IO/Float16.h"

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace moe::rt::virtual_gpu {
namespace {

using testing::DeviceArray;
using ::testing::MatchesRegex;

/// Every rank of the job in one group, as the backend's `everyone` and as
/// the group of a dp-only mesh.
comm::Group *everyone = nullptr;

class NcclBackendTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    unsetenv("MOE_VIRTUAL_GPU_NCCL_FAULTS");
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
  }
  void TearDown() override {
    unsetenv("MOE_VIRTUAL_GPU_NCCL_FAULTS");
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }

  /// The host waits for `stream` as a step does: through the watch.
  absl::Status wait(cuda::NcclWorld &nccl) {
    return nccl.watch().waitUntil([this]() -> absl::StatusOr<bool> {
      return cudaStreamQuery(stream) == cudaSuccess;
    });
  }

  int rank() const { return everyone->rank(); }
  int ranks() const { return everyone->size(); }

  cudaStream_t stream = nullptr;
};

/// Rank `rank`'s `i`-th value: exact in BF16, and sums that round.
float valueAt(int rank, int64_t i) {
  return io::bf16ToFloat(
      io::floatToBf16(static_cast<float>((rank + 1) * 37 + i % 101) / 7.0f));
}

TEST_F(NcclBackendTest, GroupSumsAreTheHostsInRankOrder) {
  absl::StatusOr<std::unique_ptr<cuda::NcclWorld>> nccl =
      cuda::NcclWorld::create(*everyone, 0);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  absl::StatusOr<std::unique_ptr<cuda::NcclGroup>> group =
      (*nccl)->split(*everyone, /*reductionLane=*/true);
  ASSERT_TRUE(group.ok()) << group.status();
  const int64_t count = 1000;
  std::vector<float> mine, floatSum;
  std::vector<uint16_t> mineBf16, bf16Sum;
  std::vector<double> mineDouble, doubleSum;
  for (int64_t i = 0; i < count; ++i) {
    mine.push_back(valueAt(rank(), i));
    mineBf16.push_back(io::floatToBf16(mine.back()));
    mineDouble.push_back(mine.back() / 3.0);
    float total = valueAt(0, i);
    double totalDouble = valueAt(0, i) / 3.0;
    for (int r = 1; r < ranks(); ++r) {
      total += valueAt(r, i);
      totalDouble += valueAt(r, i) / 3.0;
    }
    floatSum.push_back(total);
    bf16Sum.push_back(io::floatToBf16(total));
    doubleSum.push_back(totalDouble);
  }
  DeviceArray<float> floats(count);
  DeviceArray<uint16_t> halves(count);
  DeviceArray<double> doubles(count);
  floats.upload(mine, stream);
  halves.upload(mineBf16, stream);
  doubles.upload(mineDouble, stream);
  ASSERT_TRUE((*group)->allReduceSum(floats.get(), count, stream).ok());
  ASSERT_TRUE((*group)->allReduceSum(halves.get(), count, stream).ok());
  ASSERT_TRUE((*group)
                  ->forReductions()
                  .sumInRankOrder(doubles.get(), count, stream)
                  .ok());
  absl::Status waited = wait(**nccl);
  ASSERT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(floats.download(stream), floatSum);
  EXPECT_EQ(halves.download(stream), bf16Sum);
  EXPECT_EQ(doubles.download(stream), doubleSum);

  // reduceScatterSum of BF16: this rank's block of the same sum.
  DeviceArray<uint16_t> blocks(count * ranks()), block(count);
  std::vector<uint16_t> repeated;
  for (int r = 0; r < ranks(); ++r)
    repeated.insert(repeated.end(), mineBf16.begin(), mineBf16.end());
  blocks.upload(repeated, stream);
  ASSERT_TRUE((*group)
                  ->reduceScatterSum(blocks.get(), block.get(), count, stream)
                  .ok());
  ASSERT_TRUE(wait(**nccl).ok());
  EXPECT_EQ(block.download(stream), bf16Sum);
}

TEST_F(NcclBackendTest, ExpertAllToAllMovesEveryRow) {
  absl::StatusOr<std::unique_ptr<cuda::NcclWorld>> nccl =
      cuda::NcclWorld::create(*everyone, 0);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  absl::StatusOr<std::unique_ptr<cuda::NcclGroup>> group =
      (*nccl)->split(*everyone);
  ASSERT_TRUE(group.ok()) << group.status();
  // Rank r sends (r + q) % 3 rows of width 4 to rank q.
  const int64_t width = 4;
  auto rows = [](int from, int to) { return int64_t((from + to) % 3); };
  std::vector<int64_t> sendRows, recvRows;
  std::vector<float> out, expected;
  for (int peer = 0; peer < ranks(); ++peer) {
    sendRows.push_back(rows(rank(), peer));
    recvRows.push_back(rows(peer, rank()));
    for (int64_t i = 0; i < rows(rank(), peer) * width; ++i)
      out.push_back(static_cast<float>(rank() * 100 + peer * 10 + i));
    for (int64_t i = 0; i < rows(peer, rank()) * width; ++i)
      expected.push_back(static_cast<float>(peer * 100 + rank() * 10 + i));
  }
  DeviceArray<float> input(std::max<size_t>(out.size(), 1)),
      output(std::max<size_t>(expected.size(), 1));
  input.upload(out, stream);
  absl::Status moved = (*group)->allToAllRows(
      input.get(), sendRows, output.get(), recvRows, width, stream);
  ASSERT_TRUE(moved.ok()) << moved;
  ASSERT_TRUE(wait(**nccl).ok());
  std::vector<float> received = output.download(stream);
  received.resize(expected.size());
  EXPECT_EQ(received, expected);
}

TEST_F(NcclBackendTest, RankThatNeverArrivesEndsAtTheDeadline) {
  if (ranks() < 2)
    GTEST_SKIP() << "needs a peer";
  // Rank 1 never arrives at its first collective; the backend's deadline
  // (the group's, MOE_COMM_TIMEOUT_S) is 3 s here.
  setenv("MOE_VIRTUAL_GPU_NCCL_FAULTS", "hang-rank=1,at=1", 1);
  absl::Duration saved = everyone->timeout();
  everyone->setTimeout(absl::Seconds(3));
  absl::StatusOr<std::unique_ptr<cuda::NcclWorld>> nccl =
      cuda::NcclWorld::create(*everyone, 0);
  everyone->setTimeout(saved);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  absl::StatusOr<std::unique_ptr<cuda::NcclGroup>> group =
      (*nccl)->split(*everyone);
  ASSERT_TRUE(group.ok()) << group.status();
  DeviceArray<float> data(16);
  data.upload(std::vector<float>(16, 1.0f), stream);
  ASSERT_TRUE((*group)->allReduceSum(data.get(), 16, stream).ok());
  absl::Status hung = wait(**nccl);
  EXPECT_TRUE(absl::IsDeadlineExceeded(hung)) << hung;
  std::fprintf(stderr, "rank %d: error: %s\n", rank(),
               std::string(hung.message()).c_str());
  EXPECT_THAT(std::string(hung.message()),
              MatchesRegex(absl::StrCat(
                  "ncclAllReduce \\(sum\\) of 16 float32 on group \\{dp\\} of "
                  "dp=",
                  ranks(),
                  " \\(world ranks 0(, [0-9])*\\) did not complete: waited "
                  "[0-9.]+ s, the deadline \\(MOE_COMM_TIMEOUT_S\\) is 3.0 s; "
                  "a peer is dead or stuck; aborted the job's NCCL "
                  "communicators")));
  // The abort ended the collective; the device is unharmed.
  EXPECT_TRUE(testing::finishesWithin(stream, std::chrono::seconds(120)));
  EXPECT_EQ(stickyError(), cudaSuccess);
}

} // namespace
} // namespace moe::rt::virtual_gpu

int main(int argc, char **argv) {
  return moe::rt::virtual_gpu::testing::runOnEveryRank(
      argc, argv, "VirtualGpuNcclBackendTests", moe::rt::virtual_gpu::everyone);
}
