//===- NcclRanksTest.cpp - the virtual GPU's NCCL on several ranks --------===//
//
// An MPI program: test/virtual-gpu/nccl-ranks.test starts it under mpirun
// with 2, 3 and 4 ranks; started alone (as ctest does) it is a world of one
// and skips what needs a peer. Every rank runs the same tests in the same
// order, as the backend would: the world communicator made as NcclWorld
// makes it (rank 0's id broadcast over moe's comm layer, non-blocking,
// polled), then collectives of every reduction and type against the host's
// rank-order computation, a grouped all-to-all, splits into groups,
// divergent ranks named, and injected hangs and failures ending through
// the backend's own CollectiveWatch with the messages it prints. Every wait
// has a deadline.
//
//===----------------------------------------------------------------------===//
#include "NcclTesting.h"

#include "CollectiveWatch.h"
#include "VirtualGpu/Runtime.h"

#include "moe/Runtime/IO/Float16.h"

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace moe::rt::virtual_gpu {
namespace {

using testing::DeviceArray;
using testing::finishesWithin;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::settled;

constexpr const char *kFaults = "MOE_VIRTUAL_GPU_NCCL_FAULTS";
/// How long a collective of these tests may take before it counts as hung.
constexpr std::chrono::seconds kLimit(120);

/// Every rank of the job, as the backend's `everyone`.
comm::Group *everyone = nullptr;

/// The job's communicator, made as NcclWorld::create makes it: rank 0's id
/// broadcast, non-blocking, polled until it settles.
ncclComm_t makeWorldComm() {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (everyone->rank() == 0) {
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  }
  std::vector<int32_t> words(sizeof(id) / sizeof(int32_t));
  std::memcpy(words.data(), &id, sizeof(id));
  absl::Status shared = everyone->broadcast(absl::MakeSpan(words), 0);
  EXPECT_TRUE(shared.ok()) << shared;
  std::memcpy(&id, words.data(), sizeof(id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, everyone->size(), id,
                                   everyone->rank(), &config),
            ncclInProgress)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(settled(comm), ncclSuccess) << ncclGetLastError(comm);
  return comm;
}

class NcclRanksTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(selectDevice("h100").ok());
    unsetenv(kFaults);
    worldComm = makeWorldComm();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(ncclCommDestroy(worldComm), ncclSuccess);
  }
  void SetUp() override {
    unsetenv(kFaults);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
  }
  void TearDown() override {
    unsetenv(kFaults);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }

  /// A communicator of every rank, split from the world's (which re-reads
  /// MOE_VIRTUAL_GPU_NCCL_FAULTS), so a test's failures stay its own.
  static ncclComm_t everyRank() {
    ncclComm_t comm = nullptr;
    ncclResult_t split =
        ncclCommSplit(worldComm, 0, everyone->rank(), &comm, nullptr);
    EXPECT_EQ(split, ncclInProgress) << ncclGetLastError(nullptr);
    EXPECT_EQ(settled(comm), ncclSuccess);
    return comm;
  }

  int rank() const { return everyone->rank(); }
  int ranks() const { return everyone->size(); }

  static ncclComm_t worldComm;
  cudaStream_t stream = nullptr;
};

ncclComm_t NcclRanksTest::worldComm = nullptr;

/// 64 reproducible bits: input `i` of rank `rank` in the test `salt`.
uint64_t bitsAt(uint64_t salt, int rank, size_t i) {
  uint64_t x = salt * 0x9e3779b97f4a7c15ull +
               static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull + i;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A float of 24 significant bits, either sign, magnitude 2^-8 to 2^8: the
/// ranks' sums round, so their order shows.
float floatAt(uint64_t salt, int rank, size_t i) {
  uint64_t bits = bitsAt(salt, rank, i);
  float mantissa = 1.0f + static_cast<float>(bits >> 40) * 0x1p-24f;
  int exponent = static_cast<int>(bits & 15) - 8;
  return std::ldexp(bits & 16 ? -mantissa : mantissa, exponent);
}

/// Every rank's inputs, as each rank can compute them.
template <typename T>
std::vector<std::vector<T>>
inputsOfEveryRank(int ranks, size_t count,
                  const std::function<T(int, size_t)> &valueAt) {
  std::vector<std::vector<T>> inputs(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < count; ++i)
      inputs[static_cast<size_t>(r)].push_back(valueAt(r, i));
  return inputs;
}

/// The host's reduction of elements [begin, begin + count) over the ranks,
/// in rank order: decode, combine, (average,) encode.
template <typename T, typename Acc>
std::vector<T>
hostReduction(const std::vector<std::vector<T>> &inputs, size_t begin,
              size_t count, const std::function<Acc(T)> &decode,
              const std::function<Acc(Acc, Acc)> &combine,
              const std::function<T(Acc)> &encode, bool average = false) {
  std::vector<T> out;
  for (size_t i = begin; i < begin + count; ++i) {
    Acc total = decode(inputs[0][i]);
    for (size_t r = 1; r < inputs.size(); ++r)
      total = combine(total, decode(inputs[r][i]));
    if (average)
      total = total / static_cast<Acc>(inputs.size());
    out.push_back(encode(total));
  }
  return out;
}

template <typename T> T same(T value) { return value; }
template <typename T> T plus(T a, T b) { return a + b; }

/// ncclAllReduce of every rank's `inputs` on `comm`, in place.
template <typename T>
std::vector<T> allReduce(const std::vector<std::vector<T>> &inputs,
                         ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                         int rank, cudaStream_t stream) {
  size_t count = inputs[0].size();
  DeviceArray<T> data(std::max<size_t>(count, 1));
  data.upload(inputs[static_cast<size_t>(rank)], stream);
  EXPECT_EQ(
      ncclAllReduce(data.get(), data.get(), count, type, op, comm, stream),
      ncclSuccess)
      << ncclGetLastError(comm);
  EXPECT_TRUE(finishesWithin(stream, kLimit));
  std::vector<T> out = data.download(stream);
  out.resize(count);
  return out;
}

TEST_F(NcclRanksTest, AllReduceOfEveryReductionIsTheHostsInRankOrder) {
  ncclComm_t comm = everyRank();
  size_t count = 1001;
  std::vector<std::vector<float>> floats = inputsOfEveryRank<float>(
      ranks(), count, [](int r, size_t i) { return floatAt(1, r, i); });
  std::function<float(float)> asFloat = same<float>;
  std::vector<std::pair<ncclRedOp_t, std::function<float(float, float)>>>
      floatOps = {{ncclSum, plus<float>},
                  {ncclAvg, plus<float>},
                  {ncclMax, [](float a, float b) { return std::max(a, b); }},
                  {ncclMin, [](float a, float b) { return std::min(a, b); }},
                  {ncclProd, [](float a, float b) { return a * b; }}};
  for (const auto &[op, combine] : floatOps)
    EXPECT_EQ(allReduce(floats, ncclFloat32, op, comm, rank(), stream),
              (hostReduction<float, float>(floats, 0, count, asFloat, combine,
                                           asFloat, op == ncclAvg)))
        << "float " << op;

  // BF16 and FP16: fp32 sums of the decoded values, rounded once.
  auto halves = [&](uint16_t (*encode)(float), float (*decode)(uint16_t),
                    ncclDataType_t type, uint64_t salt) {
    std::vector<std::vector<uint16_t>> inputs =
        inputsOfEveryRank<uint16_t>(ranks(), count, [&](int r, size_t i) {
          return encode(floatAt(salt, r, i));
        });
    EXPECT_EQ(allReduce(inputs, type, ncclSum, comm, rank(), stream),
              (hostReduction<uint16_t, float>(inputs, 0, count, decode,
                                              plus<float>, encode)))
        << "type " << type;
  };
  halves(io::floatToBf16, io::bf16ToFloat, ncclBfloat16, 2);
  halves(io::floatToF16, io::f16ToFloat, ncclFloat16, 3);

  // Integers wrap; doubles sum in their own type.
  std::vector<std::vector<int32_t>> words =
      inputsOfEveryRank<int32_t>(ranks(), count, [](int r, size_t i) {
        return static_cast<int32_t>(bitsAt(4, r, i));
      });
  EXPECT_EQ(
      allReduce(words, ncclInt32, ncclSum, comm, rank(), stream),
      (hostReduction<int32_t, uint32_t>(
          words, 0, count, [](int32_t v) { return static_cast<uint32_t>(v); },
          plus<uint32_t>, [](uint32_t v) { return static_cast<int32_t>(v); })));
  std::vector<std::vector<int64_t>> smalls =
      inputsOfEveryRank<int64_t>(ranks(), count, [](int r, size_t i) {
        return static_cast<int64_t>(bitsAt(5, r, i) % 7) - 3;
      });
  std::function<int64_t(int64_t)> asInt64 = same<int64_t>;
  EXPECT_EQ(allReduce(smalls, ncclInt64, ncclProd, comm, rank(), stream),
            (hostReduction<int64_t, int64_t>(
                smalls, 0, count, asInt64,
                [](int64_t a, int64_t b) { return a * b; }, asInt64)));
  EXPECT_EQ(allReduce(smalls, ncclInt64, ncclMin, comm, rank(), stream),
            (hostReduction<int64_t, int64_t>(
                smalls, 0, count, asInt64,
                [](int64_t a, int64_t b) { return std::min(a, b); }, asInt64)));
  std::vector<std::vector<uint8_t>> bytes =
      inputsOfEveryRank<uint8_t>(ranks(), count, [](int r, size_t i) {
        return static_cast<uint8_t>(bitsAt(6, r, i));
      });
  std::function<uint8_t(uint8_t)> asByte = same<uint8_t>;
  EXPECT_EQ(
      allReduce(bytes, ncclUint8, ncclSum, comm, rank(), stream),
      (hostReduction<uint8_t, uint8_t>(
          bytes, 0, count, asByte,
          [](uint8_t a, uint8_t b) { return static_cast<uint8_t>(a + b); },
          asByte)));
  std::vector<std::vector<double>> doubles =
      inputsOfEveryRank<double>(ranks(), count, [](int r, size_t i) {
        return static_cast<double>(bitsAt(7, r, i) >> 11) * 0x1p-50 - 4.0;
      });
  std::function<double(double)> asDouble = same<double>;
  EXPECT_EQ(allReduce(doubles, ncclFloat64, ncclSum, comm, rank(), stream),
            (hostReduction<double, double>(doubles, 0, count, asDouble,
                                           plus<double>, asDouble)));
  // Zero elements: a collective all the same.
  std::vector<std::vector<float>> none(static_cast<size_t>(ranks()));
  EXPECT_TRUE(
      allReduce(none, ncclFloat32, ncclSum, comm, rank(), stream).empty());
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST_F(NcclRanksTest, AllGatherAndReduceScatterAreTheHosts) {
  ncclComm_t comm = everyRank();
  size_t count = 333, n = static_cast<size_t>(ranks());
  // allGather in place: this rank's block already sits in the output.
  std::vector<std::vector<float>> blocks = inputsOfEveryRank<float>(
      ranks(), count, [](int r, size_t i) { return floatAt(8, r, i); });
  DeviceArray<float> gathered(count * n);
  std::vector<float> mine(count * n, -1.0f), expected;
  for (size_t r = 0; r < n; ++r)
    expected.insert(expected.end(), blocks[r].begin(), blocks[r].end());
  std::copy(blocks[static_cast<size_t>(rank())].begin(),
            blocks[static_cast<size_t>(rank())].end(),
            mine.begin() + static_cast<ptrdiff_t>(count) * rank());
  gathered.upload(mine, stream);
  ASSERT_EQ(ncclAllGather(gathered.get() + count * rank(), gathered.get(),
                          count, ncclFloat32, comm, stream),
            ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, kLimit));
  EXPECT_EQ(gathered.download(stream), expected);

  // reduceScatter of BF16: block r of the fp32 sum, rounded once.
  std::vector<std::vector<uint16_t>> inputs =
      inputsOfEveryRank<uint16_t>(ranks(), count * n, [](int r, size_t i) {
        return io::floatToBf16(floatAt(9, r, i));
      });
  DeviceArray<uint16_t> from(count * n), to(count);
  from.upload(inputs[static_cast<size_t>(rank())], stream);
  ASSERT_EQ(ncclReduceScatter(from.get(), to.get(), count, ncclBfloat16,
                              ncclSum, comm, stream),
            ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, kLimit));
  std::function<float(uint16_t)> decode = io::bf16ToFloat;
  std::function<uint16_t(float)> encode = io::floatToBf16;
  EXPECT_EQ(to.download(stream),
            (hostReduction<uint16_t, float>(inputs, count * rank(), count,
                                            decode, plus<float>, encode)));
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST_F(NcclRanksTest, GroupedAllToAllMovesEveryBlock) {
  // As DeviceExpertParallel's exchange: a send and a receive per peer
  // (itself too), of different sizes, in one group; empty ones skipped.
  ncclComm_t comm = everyRank();
  auto rows = [](int from, int to) {
    return static_cast<size_t>((from * 3 + to * 5 + 1) % 4) * 7;
  };
  auto value = [](int from, int to, size_t i) {
    return static_cast<int32_t>(from * 1000000 + to * 1000 + i);
  };
  std::vector<int32_t> out, expected;
  std::vector<size_t> sendAt, receiveAt;
  size_t sending = 0, receiving = 0;
  for (int peer = 0; peer < ranks(); ++peer) {
    sendAt.push_back(sending);
    receiveAt.push_back(receiving);
    for (size_t i = 0; i < rows(rank(), peer); ++i)
      out.push_back(value(rank(), peer, i));
    for (size_t i = 0; i < rows(peer, rank()); ++i)
      expected.push_back(value(peer, rank(), i));
    sending += rows(rank(), peer);
    receiving += rows(peer, rank());
  }
  DeviceArray<int32_t> input(std::max<size_t>(sending, 1)),
      output(std::max<size_t>(receiving, 1));
  input.upload(out, stream);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int peer = 0; peer < ranks(); ++peer) {
    if (size_t n = rows(rank(), peer)) {
      EXPECT_EQ(ncclSend(input.get() + sendAt[peer], n, ncclInt32, peer, comm,
                         stream),
                ncclSuccess);
    }
    if (size_t n = rows(peer, rank())) {
      EXPECT_EQ(ncclRecv(output.get() + receiveAt[peer], n, ncclInt32, peer,
                         comm, stream),
                ncclSuccess);
    }
  }
  ASSERT_EQ(ncclGroupEnd(), ncclInProgress);
  EXPECT_EQ(settled(comm), ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, kLimit));
  std::vector<int32_t> received = output.download(stream);
  received.resize(receiving);
  EXPECT_EQ(received, expected);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST_F(NcclRanksTest, CommunicatorsOnTheirOwnStreamsAreIndependent) {
  // As the backend's reductions lane: two communicators of the same ranks,
  // each on a stream of its own. Odd ranks issue on them in the other
  // order, which NCCL allows: each communicator keeps its own order. The
  // first carries 4 MiB (MPI's rendezvous, not its eager messages).
  ncclComm_t first = everyRank(), second = everyRank();
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking),
            cudaSuccess);
  size_t big = size_t(1) << 20;
  DeviceArray<float> large(big), small(3);
  large.upload(std::vector<float>(big, static_cast<float>(rank() + 1)), stream);
  small.upload({1, 2, static_cast<float>(rank())}, other);
  auto issueLarge = [&] {
    EXPECT_EQ(ncclAllReduce(large.get(), large.get(), big, ncclFloat32, ncclSum,
                            first, stream),
              ncclSuccess);
  };
  auto issueSmall = [&] {
    EXPECT_EQ(ncclAllReduce(small.get(), small.get(), 3, ncclFloat32, ncclMax,
                            second, other),
              ncclSuccess);
  };
  if (rank() % 2) {
    issueSmall();
    issueLarge();
  } else {
    issueLarge();
    issueSmall();
  }
  ASSERT_TRUE(finishesWithin(stream, kLimit));
  ASSERT_TRUE(finishesWithin(other, kLimit));
  float total = static_cast<float>(ranks() * (ranks() + 1) / 2);
  EXPECT_EQ(large.download(stream), std::vector<float>(big, total));
  EXPECT_EQ(small.download(other),
            (std::vector<float>{1, 2, static_cast<float>(ranks() - 1)}));
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
  EXPECT_EQ(ncclCommDestroy(first), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(second), ncclSuccess);
}

TEST_F(NcclRanksTest, SplitsFormGroupsInKeyOrder) {
  // Even and odd ranks, each group in reverse order; the last rank of
  // three or more stays out.
  bool out = ranks() >= 3 && rank() == ranks() - 1;
  int colour = out ? NCCL_SPLIT_NOCOLOR : rank() % 2;
  ncclComm_t group = nullptr;
  ncclResult_t split =
      ncclCommSplit(worldComm, colour, ranks() - rank(), &group, nullptr);
  if (out) {
    EXPECT_EQ(split, ncclSuccess);
    EXPECT_EQ(group, nullptr);
    return;
  }
  ASSERT_EQ(split, ncclInProgress) << ncclGetLastError(nullptr);
  ASSERT_EQ(settled(group), ncclSuccess);
  std::vector<int32_t> members;
  for (int r = ranks() - 1; r >= 0; --r)
    if (r % 2 == colour && !(ranks() >= 3 && r == ranks() - 1))
      members.push_back(r);
  DeviceArray<int32_t> me(1), all(members.size());
  me.upload({rank()}, stream);
  ASSERT_EQ(ncclAllGather(me.get(), all.get(), 1, ncclInt32, group, stream),
            ncclSuccess);
  ASSERT_TRUE(finishesWithin(stream, kLimit));
  EXPECT_EQ(all.download(stream), members);
  EXPECT_EQ(ncclCommDestroy(group), ncclSuccess);
}

/// Waits for `comm`'s async error to leave ncclSuccess once `stream` ran.
ncclResult_t asyncErrorAfter(ncclComm_t comm, cudaStream_t stream) {
  EXPECT_TRUE(finishesWithin(stream, kLimit));
  ncclResult_t state = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  return state;
}

TEST_F(NcclRanksTest, DivergentCollectiveNamesBothRanks) {
  if (ranks() < 2)
    GTEST_SKIP() << "needs a peer";
  ncclComm_t comm = everyRank();
  DeviceArray<float> data(4096 * static_cast<size_t>(ranks()));
  data.upload(std::vector<float>(4096, 1.0f), stream);
  for (int agreed = 0; agreed < 16; ++agreed)
    ASSERT_EQ(ncclAllReduce(data.get(), data.get(), 16, ncclFloat32, ncclMax,
                            comm, stream),
              ncclSuccess);
  // Collective 17: rank 0 reduces, the others gather.
  if (rank() == 0)
    ASSERT_EQ(ncclAllReduce(data.get(), data.get(), 4096, ncclFloat32, ncclSum,
                            comm, stream),
              ncclSuccess);
  else
    ASSERT_EQ(
        ncclAllGather(data.get(), data.get(), 2048, ncclFloat32, comm, stream),
        ncclSuccess);
  EXPECT_EQ(asyncErrorAfter(comm, stream), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(comm),
              MatchesRegex("collective 17 on comm 0:[0-9]+/[0-9]+: rank 0 "
                           "issued allReduce\\(float, 4096, sum\\), rank 1 "
                           "issued allGather\\(float, 2048\\)"));
  // The data moved by neither: the 16 agreed maxima of ones.
  EXPECT_EQ(data.download(stream)[0], 1.0f);
  EXPECT_EQ(ncclAllReduce(data.get(), data.get(), 1, ncclFloat32, ncclSum, comm,
                          stream),
            ncclInvalidUsage);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

TEST_F(NcclRanksTest, MismatchedSendAndReceiveNameBothRanks) {
  if (ranks() < 2)
    GTEST_SKIP() << "needs a peer";
  ncclComm_t comm = everyRank();
  DeviceArray<float> data(8);
  if (rank() == 0) {
    ASSERT_EQ(ncclSend(data.get(), 8, ncclFloat32, 1, comm, stream),
              ncclSuccess);
  }
  if (rank() == 1) {
    ASSERT_EQ(ncclRecv(data.get(), 4, ncclFloat32, 0, comm, stream),
              ncclSuccess);
  }
  if (rank() <= 1) {
    EXPECT_EQ(asyncErrorAfter(comm, stream), ncclInvalidUsage);
    EXPECT_THAT(ncclGetLastError(comm),
                MatchesRegex("send 1 from rank 0 to rank 1 on comm [0-9:/]+: "
                             "rank 0 issued send\\(float, 8\\) to rank 1, "
                             "rank 1 issued recv\\(float, 4\\) from rank 0"));
  }
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

/// The backend's watch (lib/Runtime/Cuda/CollectiveWatch.h) over `comm`,
/// with NcclWorld's hooks, and a deadline of `timeout`.
std::unique_ptr<cuda::CollectiveWatch> watchOver(ncclComm_t &comm,
                                                 absl::Duration timeout) {
  cuda::CollectiveWatch::Hooks hooks;
  hooks.reached = [](void *marker) -> absl::StatusOr<bool> {
    cudaError_t state = cudaEventQuery(static_cast<cudaEvent_t>(marker));
    if (state == cudaErrorNotReady)
      return false;
    if (state != cudaSuccess)
      return absl::InternalError(cudaGetErrorString(state));
    return true;
  };
  hooks.release = [](void *marker) {
    cudaEventDestroy(static_cast<cudaEvent_t>(marker));
  };
  hooks.asyncError = [&comm]() -> absl::Status {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess ||
        (state != ncclSuccess && state != ncclInProgress))
      return absl::FailedPreconditionError(
          absl::StrCat("ncclCommGetAsyncError: ", ncclGetErrorString(state),
                       " (", ncclGetLastError(comm), ")"));
    return absl::OkStatus();
  };
  hooks.abortAll = [&comm] { ncclCommAbort(comm); };
  return std::make_unique<cuda::CollectiveWatch>(std::move(hooks), timeout);
}

/// An allReduce of 16 floats on `comm` handed to `watch`, as NcclGroup
/// names it; then the host waits for the stream as the backend does.
absl::Status watchedAllReduce(cuda::CollectiveWatch &watch, ncclComm_t comm,
                              float *data, cudaStream_t stream) {
  EXPECT_EQ(ncclAllReduce(data, data, 16, ncclFloat32, ncclSum, comm, stream),
            ncclSuccess);
  cudaEvent_t marker;
  EXPECT_EQ(cudaEventCreateWithFlags(&marker, cudaEventDisableTiming),
            cudaSuccess);
  EXPECT_EQ(cudaEventRecord(marker, stream), cudaSuccess);
  watch.enqueued(absl::StrCat("ncclAllReduce (sum) of 16 float32 on group "
                              "{dp} of dp=",
                              everyone->size()),
                 marker);
  return watch.waitUntil([stream]() -> absl::StatusOr<bool> {
    return cudaStreamQuery(stream) == cudaSuccess;
  });
}

TEST_F(NcclRanksTest, HungRankEndsAtTheDeadlineOnEveryRank) {
  if (ranks() < 2)
    GTEST_SKIP() << "needs a peer";
  // Rank 1 never arrives at its second operation; the split counts as none.
  setenv(kFaults, "hang-rank=1,at=2", 1);
  ncclComm_t comm = everyRank();
  // The deadline of the hung collective; the healthy ranks' start within
  // it (their host polls them at once), so each says whom it waits for.
  std::unique_ptr<cuda::CollectiveWatch> watch =
      watchOver(comm, absl::Seconds(3));
  DeviceArray<float> data(16);
  data.upload(std::vector<float>(16, 1.0f), stream);
  // The first completes well before its deadline: the watch allows it the
  // whole kLimit.
  std::unique_ptr<cuda::CollectiveWatch> patient =
      watchOver(comm, absl::FromChrono(kLimit));
  ASSERT_TRUE(watchedAllReduce(*patient, comm, data.get(), stream).ok());
  absl::Status hung = watchedAllReduce(*watch, comm, data.get(), stream);
  EXPECT_TRUE(absl::IsDeadlineExceeded(hung)) << hung;
  EXPECT_THAT(std::string(hung.message()),
              MatchesRegex("ncclAllReduce \\(sum\\) of 16 float32 on group "
                           "\\{dp\\} of dp=[0-9] did not complete: waited "
                           "[0-9.]+ s, the deadline \\(MOE_COMM_TIMEOUT_S\\) "
                           "is 3.0 s; a peer is dead or stuck; aborted the "
                           "job's NCCL communicators"));
  // The abort ended the waiting collective on every rank, the hung one too,
  // and said whom it waited for.
  ASSERT_TRUE(finishesWithin(stream, kLimit));
  std::string stopped = ncclGetLastError(nullptr);
  if (rank() == 1) {
    EXPECT_THAT(stopped,
                MatchesRegex("ncclCommAbort stopped collective 2 on comm "
                             "[0-9:/]+ \\(allReduce\\(float, 16, sum\\)\\) on "
                             "rank 1 which never arrived \\(injected: "
                             "hang-rank=1,at=2 in "
                             "MOE_VIRTUAL_GPU_NCCL_FAULTS\\)"));
  } else {
    EXPECT_THAT(stopped,
                MatchesRegex(absl::StrCat(
                    "ncclCommAbort stopped collective 2 on comm [0-9:/]+ "
                    "\\(allReduce\\(float, 16, sum\\)\\) on rank ",
                    rank(),
                    " while waiting for ranks? ([0-9]+, )*1(, "
                    "[0-9]+)* to arrive")));
  }
  // The watch aborted the communicator; a later check repeats the error.
  EXPECT_TRUE(absl::IsDeadlineExceeded(watch->check()));
  patient.reset();
}

TEST_F(NcclRanksTest, FailedRankIsARemoteErrorOnItsPeers) {
  if (ranks() < 2)
    GTEST_SKIP() << "needs a peer";
  setenv(kFaults, "fail-rank=1,at=1", 1);
  ncclComm_t comm = everyRank();
  std::unique_ptr<cuda::CollectiveWatch> watch =
      watchOver(comm, absl::FromChrono(kLimit));
  DeviceArray<float> data(16);
  data.upload(std::vector<float>(16, 1.0f), stream);
  absl::Status failed = watchedAllReduce(*watch, comm, data.get(), stream);
  std::string during = absl::StrCat(
      "NCCL failed (during ncclAllReduce \\(sum\\) of 16 float32 on group "
      "\\{dp\\} of dp=",
      ranks(), "|after the last collective completed): ");
  if (rank() == 1) {
    EXPECT_THAT(
        std::string(failed.message()),
        MatchesRegex(absl::StrCat(
            during, "ncclCommGetAsyncError: unhandled system error "
                    "\\(collective 1 on comm [0-9:/]+ "
                    "\\(allReduce\\(float, 16, sum\\)\\) failed on rank 1 "
                    "\\(injected: fail-rank=1,at=1 in "
                    "MOE_VIRTUAL_GPU_NCCL_FAULTS\\)\\); aborted the job's "
                    "NCCL communicators")));
  } else {
    EXPECT_THAT(
        std::string(failed.message()),
        MatchesRegex(absl::StrCat(
            during, "ncclCommGetAsyncError: remote process exited or there "
                    "was a network error \\(collective 1 on comm [0-9:/]+: "
                    "rank 1 failed its allReduce\\(float, 16, sum\\) "
                    "\\(unhandled system error\\)\\); aborted the job's NCCL "
                    "communicators")));
  }
  ASSERT_TRUE(finishesWithin(stream, kLimit));
}

} // namespace
} // namespace moe::rt::virtual_gpu

int main(int argc, char **argv) {
  return moe::rt::virtual_gpu::testing::runOnEveryRank(
      argc, argv, "VirtualGpuNcclRanksTests", moe::rt::virtual_gpu::everyone);
}
