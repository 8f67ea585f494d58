//===- NcclTest.cpp - the virtual GPU's NCCL on one rank ------------------===//
//
// The NCCL subset against nccl.h's semantics where one rank can show them:
// communicators of one rank (this binary never starts MPI), collectives,
// groups and sends to self, the host's checks, non-blocking creation, the
// reductions, and MOE_VIRTUAL_GPU_NCCL_FAULTS's hang and failure ending at
// ncclCommAbort and in the asynchronous error. Several ranks are
// NcclRanksTest.cpp's, under mpirun. A test that leaves a sticky CUDA error
// behind runs in a child process (EXPECT_EXIT).
//
//===----------------------------------------------------------------------===//
#include "NcclTesting.h"

#include "VirtualGpu/NcclFaults.h"
#include "VirtualGpu/NcclReduce.h"
#include "VirtualGpu/Runtime.h"

#include "moe/Runtime/IO/Float16.h"

#include "absl/synchronization/notification.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <string>

namespace moe::rt::virtual_gpu {
namespace {

using testing::DeviceArray;
using testing::finishesWithin;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::settled;

constexpr const char *kFaults = "MOE_VIRTUAL_GPU_NCCL_FAULTS";

ncclConfig_t configOf(int blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;
  return config;
}

/// A communicator of this one rank, made with `config`; its result in
/// `made`.
ncclComm_t oneRank(ncclResult_t &made, ncclConfig_t config = configOf(1)) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  made = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  return comm;
}

std::string lastError(ncclComm_t comm = nullptr) {
  return ncclGetLastError(comm);
}

class NcclTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    ASSERT_EQ(stickyError(), cudaSuccess);
    unsetenv(kFaults);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
    ncclResult_t made;
    comm = oneRank(made);
    ASSERT_EQ(made, ncclSuccess) << lastError();
  }
  void TearDown() override {
    if (comm) {
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    }
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    unsetenv(kFaults);
  }

  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
};

TEST(NcclErrorStringTest, EveryResultHasItsString) {
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidUsage), "invalid usage");
  EXPECT_STREQ(ncclGetErrorString(ncclRemoteError),
               "remote process exited or there was a network error");
  EXPECT_STREQ(ncclGetErrorString(ncclInProgress),
               "NCCL operation in progress");
  // 15 and 13 below: no enumerator, but within the enum's values (UBSan
  // holds tests to that).
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(15)),
               "unknown result code");
}

TEST(NcclFaultPlanTest, ReadsEverySetting) {
  absl::StatusOr<nccl::FaultPlan> plan =
      nccl::parseFaultPlan("in-progress=3,hang-rank=1,at=5,fail-rank=2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->inProgress, 3);
  ASSERT_EQ(plan->rankFaults.size(), 2u);
  EXPECT_EQ(plan->rankFaults[0].fault, nccl::InjectedFault::Hang);
  EXPECT_EQ(plan->rankFaults[0].rank, 1);
  EXPECT_EQ(plan->rankFaults[0].at, 5u);
  EXPECT_EQ(plan->rankFaults[1].fault, nccl::InjectedFault::Fail);
  EXPECT_EQ(plan->rankFaults[1].at, 1u);
  EXPECT_TRUE(nccl::parseFaultPlan("").ok());
}

TEST(NcclFaultPlanTest, NamesTheSettingItCannotRead) {
  for (const char *bad :
       {"hang-rank=x", "at=2", "slow=1", "fail-rank=0,at=0"}) {
    absl::StatusOr<nccl::FaultPlan> plan = nccl::parseFaultPlan(bad);
    ASSERT_FALSE(plan.ok()) << bad;
    EXPECT_THAT(std::string(plan.status().message()),
                HasSubstr(std::string("MOE_VIRTUAL_GPU_NCCL_FAULTS='") + bad));
  }
}

uint16_t bf16(float value) { return io::floatToBf16(value); }

TEST(NcclReduceTest, Bf16SumsRoundOnceInRankOrder) {
  // 1 + 2^-8 is a tie that rounds to 1 in BF16: a ring rounding after each
  // hop would lose both halves; one rounding of the fp32 sum keeps them.
  std::vector<uint16_t> a = {bf16(1.0f)}, b = {bf16(0x1p-8f)},
                        c = {bf16(0x1p-8f)}, out(1);
  nccl::reduceInRankOrder(ncclBfloat16, ncclSum, {a.data(), b.data(), c.data()},
                          out.data(), 1);
  EXPECT_EQ(io::bf16ToFloat(out[0]), 1.0f + 0x1p-7f);
}

TEST(NcclReduceTest, FloatSumsFollowRankOrder) {
  // (1e8 + 1) - 1e8 loses the 1 in fp32; the order of the ranks decides.
  std::vector<float> big = {1e8f}, one = {1.0f}, minusBig = {-1e8f}, out(1);
  nccl::reduceInRankOrder(ncclFloat32, ncclSum,
                          {big.data(), one.data(), minusBig.data()}, out.data(),
                          1);
  EXPECT_EQ(out[0], 0.0f);
  nccl::reduceInRankOrder(ncclFloat32, ncclSum,
                          {big.data(), minusBig.data(), one.data()}, out.data(),
                          1);
  EXPECT_EQ(out[0], 1.0f);
}

TEST(NcclReduceTest, MaxAndMinKeepANaN) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {1.0f, nan}, b = {nan, 2.0f}, out(2);
  for (ncclRedOp_t op : {ncclMax, ncclMin}) {
    nccl::reduceInRankOrder(ncclFloat32, op, {a.data(), b.data()}, out.data(),
                            2);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  }
  std::vector<float> c = {1.0f, -3.0f}, d = {2.0f, -4.0f};
  nccl::reduceInRankOrder(ncclFloat32, ncclMax, {c.data(), d.data()},
                          out.data(), 2);
  EXPECT_EQ(out, (std::vector<float>{2.0f, -3.0f}));
  nccl::reduceInRankOrder(ncclFloat32, ncclMin, {c.data(), d.data()},
                          out.data(), 2);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -4.0f}));
}

TEST(NcclReduceTest, IntegersWrapAndAverageTruncates) {
  std::vector<int32_t> a = {std::numeric_limits<int32_t>::max(), 7}, b = {1, 0},
                       out(2);
  nccl::reduceInRankOrder(ncclInt32, ncclSum, {a.data(), b.data()}, out.data(),
                          2);
  EXPECT_EQ(out[0], std::numeric_limits<int32_t>::min());
  nccl::reduceInRankOrder(ncclInt32, ncclAvg, {a.data(), b.data()}, out.data(),
                          2);
  EXPECT_EQ(out[1], 3);
  std::vector<uint8_t> x = {200}, y = {100}, bytes(1);
  nccl::reduceInRankOrder(ncclUint8, ncclSum, {x.data(), y.data()},
                          bytes.data(), 1);
  EXPECT_EQ(bytes[0], 44);
  EXPECT_FALSE(nccl::canReduce(ncclFloat8e4m3, ncclSum));
  EXPECT_FALSE(nccl::canReduce(ncclFloat32, static_cast<ncclRedOp_t>(5)));
}

TEST_F(NcclTest, UniqueIdsDiffer) {
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof(a)), 0);
}

TEST_F(NcclTest, DestroyedCommunicatorIsRefused) {
  ncclResult_t state;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  ASSERT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("ncclCommDestroy: not a live "
                                     "communicator"));
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclInvalidArgument);
  comm = nullptr;
}

TEST_F(NcclTest, SeveralRanksNeedMpi) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t two = nullptr;
  ncclConfig_t config = configOf(1);
  EXPECT_EQ(ncclCommInitRankConfig(&two, 2, id, 0, &config), ncclInvalidUsage);
  EXPECT_EQ(two, nullptr);
  EXPECT_THAT(lastError(), HasSubstr("of 2 ranks, but MPI is not "
                                     "initialised"));
  EXPECT_EQ(ncclCommInitRankConfig(&two, 1, id, 1, &config),
            ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("rank 1 of 1 ranks"));
}

TEST_F(NcclTest, OnlyIdsFromNcclGetUniqueIdAreAccepted) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclComm_t other = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&other, 1, id, 0, nullptr),
            ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("not made by ncclGetUniqueId"));
  ncclConfig_t raw;
  std::memset(&raw, 0, sizeof(raw));
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRankConfig(&other, 1, id, 0, &raw),
            ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("NCCL_CONFIG_INITIALIZER"));
}

TEST_F(NcclTest, NonBlockingInitIsInProgressUntilPolled) {
  setenv(kFaults, "in-progress=3", 1);
  ncclResult_t made;
  ncclComm_t pending = oneRank(made, configOf(0));
  ASSERT_EQ(made, ncclInProgress) << lastError();
  // Not usable until it settles.
  DeviceArray<float> data(4);
  EXPECT_EQ(ncclAllReduce(data.get(), data.get(), 4, ncclFloat32, ncclSum,
                          pending, stream),
            ncclInvalidUsage);
  EXPECT_THAT(lastError(), HasSubstr("still being made"));
  for (int poll = 0; poll < 3; ++poll) {
    ncclResult_t state;
    ASSERT_EQ(ncclCommGetAsyncError(pending, &state), ncclSuccess);
    EXPECT_EQ(state, ncclInProgress) << poll;
  }
  EXPECT_EQ(settled(pending), ncclSuccess);
  EXPECT_EQ(settled(pending), ncclSuccess);
  // A non-blocking communicator's group may answer ncclInProgress.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(data.get(), data.get(), 4, ncclFloat32, ncclMax,
                          pending, stream),
            ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInProgress);
  EXPECT_EQ(settled(pending), ncclSuccess);
  EXPECT_TRUE(finishesWithin(stream, std::chrono::seconds(60)));
  EXPECT_EQ(ncclCommDestroy(pending), ncclSuccess);
}

TEST_F(NcclTest, UnreadableFaultSettingRefusesInit) {
  setenv(kFaults, "hang-rank=one", 1);
  ncclResult_t made;
  EXPECT_EQ(oneRank(made), nullptr);
  EXPECT_EQ(made, ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("setting 'hang-rank=one'"));
}

TEST_F(NcclTest, SplitOfOneRank) {
  ncclComm_t child = nullptr, none = nullptr;
  ASSERT_EQ(ncclCommSplit(comm, 0, 0, &child, nullptr), ncclSuccess);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr),
            ncclSuccess);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(ncclCommSplit(comm, -5, 0, &none, nullptr), ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("colour -5 is negative"));
  // The third split of the parent, non-blocking, polled once more.
  setenv(kFaults, "in-progress=1", 1);
  ncclComm_t late = nullptr;
  ncclConfig_t config = configOf(0);
  ASSERT_EQ(ncclCommSplit(comm, 1, 0, &late, &config), ncclInProgress);
  ncclResult_t state;
  ASSERT_EQ(ncclCommGetAsyncError(late, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  EXPECT_EQ(settled(late), ncclSuccess);
  // Its name says whose split it is.
  EXPECT_EQ(
      ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, late, stream),
      ncclInvalidArgument);
  EXPECT_THAT(lastError(),
              MatchesRegex("ncclAllReduce on comm [0-9]+:[0-9]+/3: a null "
                           "buffer for 1 elements"));
  DeviceArray<float> data(3);
  data.upload({1, 2, 3}, stream);
  ASSERT_EQ(ncclAllReduce(data.get(), data.get(), 3, ncclFloat32, ncclSum,
                          child, stream),
            ncclSuccess);
  EXPECT_EQ(data.download(stream), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(late), ncclSuccess);
}

TEST_F(NcclTest, CollectivesOfOneRankKeepItsData) {
  DeviceArray<float> in(4), out(4), gathered(4), scattered(4);
  in.upload({1.5f, -2, 3, 4}, stream);
  ASSERT_EQ(
      ncclAllReduce(in.get(), out.get(), 4, ncclFloat32, ncclAvg, comm, stream),
      ncclSuccess);
  ASSERT_EQ(
      ncclAllGather(in.get(), gathered.get(), 4, ncclFloat32, comm, stream),
      ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(in.get(), scattered.get(), 4, ncclFloat32,
                              ncclSum, comm, stream),
            ncclSuccess);
  std::vector<float> expected = {1.5f, -2, 3, 4};
  EXPECT_EQ(out.download(stream), expected);
  EXPECT_EQ(gathered.download(stream), expected);
  EXPECT_EQ(scattered.download(stream), expected);
  // In place, BF16.
  DeviceArray<uint16_t> halves(2);
  halves.upload({bf16(0.25f), bf16(-8)}, stream);
  ASSERT_EQ(ncclAllReduce(halves.get(), halves.get(), 2, ncclBfloat16, ncclSum,
                          comm, stream),
            ncclSuccess);
  EXPECT_EQ(halves.download(stream),
            (std::vector<uint16_t>{bf16(0.25f), bf16(-8)}));
}

TEST_F(NcclTest, GroupedSendToSelfArrives) {
  DeviceArray<int32_t> from(3), to(3);
  from.upload({7, 8, 9}, stream);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclRecv(to.get(), 3, ncclInt32, 0, comm, stream), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclSend(from.get(), 3, ncclInt32, 0, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(to.download(stream), (std::vector<int32_t>{7, 8, 9}));
}

TEST_F(NcclTest, UnpairedSendToSelfIsRefused) {
  DeviceArray<float> from(4), to(4);
  EXPECT_EQ(ncclSend(from.get(), 4, ncclFloat32, 0, comm, stream),
            ncclInvalidUsage);
  EXPECT_THAT(lastError(), HasSubstr("send(float, 4) to rank 0 on comm "));
  EXPECT_THAT(lastError(), HasSubstr("has no matching receive in its group"));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(from.get(), 4, ncclFloat32, 0, comm, stream), ncclSuccess);
  EXPECT_EQ(ncclRecv(to.get(), 2, ncclFloat32, 0, comm, stream), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_THAT(lastError(),
              HasSubstr("rank 0 issued send(float, 4) to rank 0 and "
                        "recv(float, 2) from rank 0, which differ"));
  // Nothing of the refused group ran: `to` is still poisoned.
  std::vector<float> untouched = to.download(stream);
  EXPECT_TRUE(std::isnan(untouched[0]));
}

TEST_F(NcclTest, RefusedCallFailsItsWholeGroup) {
  DeviceArray<float> data(4);
  data.upload({1, 2, 3, 4}, stream);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(data.get(), data.get(), 4, ncclFloat32, ncclSum, comm,
                          stream),
            ncclSuccess);
  EXPECT_EQ(ncclAllReduce(data.get(), data.get(), 4, ncclFloat8e4m3, ncclSum,
                          comm, stream),
            ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("does not reduce float8e4m3 with sum"));
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_THAT(lastError(), HasSubstr("no group was started"));
  // The next call is not in a group.
  EXPECT_EQ(ncclAllGather(data.get(), data.get(), 4, ncclFloat32, comm, stream),
            ncclSuccess);
  EXPECT_EQ(data.download(stream), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(NcclTest, HostRefusesWhatNcclRefuses) {
  DeviceArray<float> data(4);
  EXPECT_EQ(ncclAllReduce(data.get(), data.get(), 4,
                          static_cast<ncclDataType_t>(13), ncclSum, comm,
                          stream),
            ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("unknown data type 13"));
  EXPECT_EQ(ncclSend(data.get(), 4, ncclFloat32, 1, comm, stream),
            ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("peer 1 is not a rank of 1"));
  EXPECT_EQ(
      ncclAllGather(data.get(), data.get(), 4, ncclFloat32, nullptr, stream),
      ncclInvalidArgument);
  EXPECT_THAT(lastError(), HasSubstr("ncclAllGather: not a live "
                                     "communicator"));
  // Zero elements need no buffers.
  EXPECT_EQ(
      ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, stream),
      ncclSuccess);
  EXPECT_TRUE(finishesWithin(stream, std::chrono::seconds(60)));
}

TEST_F(NcclTest, HungCollectiveEndsAtAbort) {
  setenv(kFaults, "hang-rank=0,at=2", 1);
  ncclResult_t made;
  ncclComm_t hanging = oneRank(made);
  ASSERT_EQ(made, ncclSuccess) << lastError();
  DeviceArray<float> data(4);
  data.upload({1, 2, 3, 4}, stream);
  ASSERT_EQ(ncclAllReduce(data.get(), data.get(), 4, ncclFloat32, ncclSum,
                          hanging, stream),
            ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, std::chrono::seconds(60)));
  ASSERT_EQ(ncclAllReduce(data.get(), data.get(), 4, ncclFloat32, ncclSum,
                          hanging, stream),
            ncclSuccess);
  // It never completes by itself; the abort ends it.
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  ASSERT_EQ(ncclCommAbort(hanging), ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, std::chrono::seconds(60)));
  EXPECT_THAT(lastError(),
              MatchesRegex("ncclCommAbort stopped collective 2 on comm "
                           "[0-9:]+ \\(allReduce\\(float, 4, sum\\)\\) on "
                           "rank 0 which never arrived \\(injected: "
                           "hang-rank=0,at=2 in "
                           "MOE_VIRTUAL_GPU_NCCL_FAULTS\\)"));
  ncclResult_t state;
  EXPECT_EQ(ncclCommGetAsyncError(hanging, &state), ncclInvalidArgument);
  EXPECT_EQ(stickyError(), cudaSuccess);
}

TEST_F(NcclTest, InjectedFailureIsTheAsyncError) {
  setenv(kFaults, "fail-rank=0,at=1", 1);
  ncclResult_t made;
  ncclComm_t failing = oneRank(made);
  ASSERT_EQ(made, ncclSuccess) << lastError();
  DeviceArray<float> data(2);
  data.upload({1, 2}, stream);
  ASSERT_EQ(
      ncclAllGather(data.get(), data.get(), 2, ncclFloat32, failing, stream),
      ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, std::chrono::seconds(60)));
  ncclResult_t state;
  ASSERT_EQ(ncclCommGetAsyncError(failing, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSystemError);
  EXPECT_THAT(lastError(failing),
              MatchesRegex("collective 1 on comm [0-9:]+ "
                           "\\(allGather\\(float, 2\\)\\) failed on rank 0 "
                           "\\(injected: fail-rank=0,at=1 in "
                           "MOE_VIRTUAL_GPU_NCCL_FAULTS\\)"));
  // A failed communicator takes nothing more, and is aborted.
  EXPECT_EQ(
      ncclAllGather(data.get(), data.get(), 2, ncclFloat32, failing, stream),
      ncclSystemError);
  EXPECT_EQ(ncclCommAbort(failing), ncclSuccess);
}

TEST_F(NcclTest, DestroyLetsQueuedCollectivesFinish) {
  ncclResult_t made;
  ncclComm_t other = oneRank(made);
  ASSERT_EQ(made, ncclSuccess);
  DeviceArray<float> in(2), out(2);
  in.upload({5, 6}, stream);
  ASSERT_EQ(ncclAllReduce(in.get(), out.get(), 2, ncclFloat32, ncclMin, other,
                          stream),
            ncclSuccess);
  ASSERT_EQ(ncclCommDestroy(other), ncclSuccess);
  EXPECT_EQ(out.download(stream), (std::vector<float>{5, 6}));
}

TEST_F(NcclTest, CollectiveSkippedAfterAFaultLetsDestroyReturn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // A gate holds the stream while a fault and a collective queue up
        // behind it; opened, the fault runs and the device skips the
        // collective, which ncclCommDestroy must not wait for forever.
        auto gate = std::make_shared<absl::Notification>();
        bool ok = enqueue(stream, "gate", [gate] {
                    gate->WaitForNotification();
                  }) == cudaSuccess;
        ok &= enqueue(stream, "fault", [] {
                fault(cudaErrorLaunchFailure, "a kernel failed");
              }) == cudaSuccess;
        DeviceArray<float> data(4);
        ok &= ncclAllReduce(data.get(), data.get(), 4, ncclFloat32, ncclSum,
                            comm, stream) == ncclSuccess;
        gate->Notify();
        std::future<ncclResult_t> destroyed = std::async(
            std::launch::async, [this] { return ncclCommDestroy(comm); });
        if (destroyed.wait_for(std::chrono::seconds(60)) !=
            std::future_status::ready) {
          std::fprintf(stderr, "ncclCommDestroy hung\n");
          std::_Exit(1);
        }
        ok &= destroyed.get() == ncclSuccess;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "a kernel failed");
}

TEST_F(NcclTest, OperandsOutsideDeviceMemoryFaultTheDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        DeviceArray<float> small(4);
        bool ok = ncclAllReduce(small.get(), small.get(), 8, ncclFloat32,
                                ncclSum, comm, stream) == ncclSuccess;
        ok &= cudaStreamSynchronize(stream) == cudaErrorIllegalAddress;
        ncclResult_t state;
        ok &= ncclCommGetAsyncError(comm, &state) == ncclSuccess &&
              state == ncclUnhandledCudaError;
        std::fprintf(stderr, "async error: %s\n", ncclGetLastError(comm));
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "async error: collective 1 on comm [0-9:]+ on rank 0: the send buffer "
      "of collective 1 on comm [0-9:]+ \\(allReduce\\(float, 8, sum\\)\\)");
}

} // namespace
} // namespace moe::rt::virtual_gpu
