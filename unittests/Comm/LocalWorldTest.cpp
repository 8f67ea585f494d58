//===- LocalWorldTest.cpp - the world of one rank, without MPI ------------===//
#include "moe/Runtime/Comm/Communicator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <cstring>

using namespace moe::rt::comm;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::unique_ptr<World> localWorld() {
  absl::StatusOr<std::unique_ptr<World>> world = World::local();
  EXPECT_TRUE(world.ok()) << world.status();
  return std::move(*world);
}

std::unique_ptr<Group> groupOf(World &world, const Mesh &mesh,
                               std::vector<std::string> axes) {
  absl::StatusOr<std::unique_ptr<Group>> group = world.group(mesh, axes);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

const Mesh kUnitMesh{{"dp", "tp"}, {1, 1}};

TEST(LocalWorld, IsOneRankWithoutMpi) {
  std::unique_ptr<World> world = localWorld();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_FALSE(world->usesMpi());
  EXPECT_TRUE(world->healthy());
  EXPECT_TRUE(world->finalize().ok());
}

// A process no launcher started is a world of one that never touches MPI,
// so the bare GPU machine (no MPI runtime) runs moe-run and the tests; each
// launcher's variable makes it an MPI world instead.
TEST(LocalWorld, IsWhatAProcessStartedAloneGets) {
  const char *launchers[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                             "SLURM_PROCID", "MPI_LOCALNRANKS"};
  for (const char *var : launchers)
    if (std::getenv(var))
      GTEST_SKIP() << "started by a launcher (" << var << " is set)";
  EXPECT_FALSE(World::startedByLauncher());
  int argc = 0;
  char **argv = nullptr;
  absl::StatusOr<std::unique_ptr<World>> world = World::start(&argc, &argv);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_FALSE((*world)->usesMpi());
  EXPECT_EQ((*world)->size(), 1);
  for (const char *var : launchers) {
    setenv(var, "0", 1);
    EXPECT_TRUE(World::startedByLauncher()) << var;
    unsetenv(var);
  }
}

TEST(LocalWorld, GroupsOfAUnitMesh) {
  std::unique_ptr<World> world = localWorld();
  for (std::vector<std::string> axes :
       {std::vector<std::string>{}, {"tp"}, {"dp", "tp"}, {"tp", "dp"}}) {
    std::unique_ptr<Group> group = groupOf(*world, kUnitMesh, axes);
    ASSERT_TRUE(group);
    EXPECT_EQ(group->rank(), 0);
    EXPECT_EQ(group->size(), 1);
    EXPECT_THAT(group->worldRanks(), ElementsAre(0));
  }
  std::unique_ptr<Group> tp = groupOf(*world, kUnitMesh, {"tp"});
  EXPECT_EQ(tp->name(), "{tp} of dp=1 x tp=1");
  EXPECT_TRUE(groupOf(*world, Mesh{}, {}));
}

TEST(LocalWorld, GroupErrors) {
  std::unique_ptr<World> world = localWorld();
  absl::StatusOr<std::unique_ptr<Group>> bigger =
      world->group(Mesh{{"dp", "tp"}, {2, 2}}, {"tp"});
  EXPECT_EQ(bigger.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bigger.status().message(),
              HasSubstr("the mesh has 4 ranks (dp=2 x tp=2) but this world "
                        "is a single process without MPI"));
  EXPECT_THAT(world->group(kUnitMesh, {"ep"}).status().message(),
              HasSubstr("the mesh dp=1 x tp=1 has no axis 'ep'"));
  EXPECT_THAT(world->group(kUnitMesh, {"dp", "dp"}).status().message(),
              HasSubstr("listed twice"));
  EXPECT_THAT(world->group(Mesh{{"dp"}, {0}}, {}).status().message(),
              HasSubstr("sizes must be positive"));
}

TEST(LocalWorld, CollectivesOfOneRank) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {"dp", "tp"});

  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(g->allReduceSum(absl::MakeSpan(data)).ok());
  EXPECT_THAT(data, ElementsAre(1.5f, -2.0f, 3.25f));
  std::vector<int32_t> ints = {7, -8};
  ASSERT_TRUE(g->allReduceSum(absl::MakeSpan(ints)).ok());
  EXPECT_THAT(ints, ElementsAre(7, -8));

  std::vector<float> gathered(3);
  ASSERT_TRUE(g->allGather(data, absl::MakeSpan(gathered)).ok());
  EXPECT_EQ(gathered, data);
  // In place: the input is this rank's slot of the output.
  ASSERT_TRUE(
      g->allGather(absl::MakeConstSpan(gathered), absl::MakeSpan(gathered))
          .ok());
  EXPECT_EQ(gathered, data);

  std::vector<int32_t> scattered(2);
  ASSERT_TRUE(g->reduceScatterSum(ints, absl::MakeSpan(scattered)).ok());
  EXPECT_THAT(scattered, ElementsAre(7, -8));

  std::vector<float> out(5, 0.0f);
  std::vector<int64_t> sendCounts = {2}, sendOffsets = {1}, recvCounts = {2},
                       recvOffsets = {3};
  ASSERT_TRUE(g->allToAll(data, sendCounts, sendOffsets, absl::MakeSpan(out),
                          recvCounts, recvOffsets)
                  .ok());
  EXPECT_THAT(out, ElementsAre(0.0f, 0.0f, 0.0f, -2.0f, 3.25f));

  absl::StatusOr<std::vector<int64_t>> counts = g->exchangeCounts({42});
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_THAT(*counts, ElementsAre(42));

  ASSERT_TRUE(g->broadcast(absl::MakeSpan(data), 0).ok());
  EXPECT_THAT(data, ElementsAre(1.5f, -2.0f, 3.25f));
  EXPECT_TRUE(g->barrier().ok());
}

TEST(LocalWorld, SendToSelf) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {});
  // A receive posted before its send completes once the send arrives;
  // messages are matched by tag.
  std::vector<float> first(2), second(1);
  absl::StatusOr<Request> recvFirst = g->startRecv(absl::MakeSpan(first), 0, 1);
  ASSERT_TRUE(recvFirst.ok());
  EXPECT_FALSE(*recvFirst->test());
  ASSERT_TRUE(g->send(std::vector<float>{9.0f}, 0, 2).ok());
  ASSERT_TRUE(g->send(std::vector<float>{4.0f, 5.0f}, 0, 1).ok());
  EXPECT_TRUE(recvFirst->wait().ok());
  EXPECT_THAT(first, ElementsAre(4.0f, 5.0f));
  EXPECT_TRUE(g->recv(absl::MakeSpan(second), 0, 2).ok());
  EXPECT_THAT(second, ElementsAre(9.0f));
}

TEST(LocalWorld, ArgumentErrors) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {"tp"});
  std::vector<float> a(4), b(4);

  absl::Status status =
      g->allGather(absl::MakeConstSpan(a).first(2), absl::MakeSpan(b));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("allGather of 2 f32 on group {tp} of dp=1 x tp=1: the "
                        "output has 4 elements, expected 1 x 2"));
  EXPECT_THAT(g->allGather(absl::MakeConstSpan(a).subspan(1, 2),
                           absl::MakeSpan(a).first(2))
                  .message(),
              HasSubstr("overlaps the output"));
  EXPECT_THAT(g->reduceScatterSum(absl::MakeConstSpan(a).first(3),
                                  absl::MakeSpan(b).first(2))
                  .message(),
              HasSubstr("the input has 3 elements, expected 1 x 2"));
  EXPECT_THAT(g->reduceScatterSum(absl::MakeConstSpan(a).first(2),
                                  absl::MakeSpan(a).subspan(1, 2))
                  .message(),
              HasSubstr("the input and the output overlap"));

  std::vector<int64_t> one = {1}, zero = {0}, three = {3}, two = {2};
  EXPECT_THAT(
      g->allToAll(a, two, three, absl::MakeSpan(b), two, zero).message(),
      HasSubstr("send region [3, 5) for rank 0 is outside the "
                "4-element buffer"));
  EXPECT_THAT(g->allToAll(a, std::vector<int64_t>{1, 1}, zero,
                          absl::MakeSpan(b), one, zero)
                  .message(),
              HasSubstr("need 1 entries"));
  EXPECT_THAT(
      g->allToAll(a, three, zero, absl::MakeSpan(b), two, zero).message(),
      HasSubstr("sends 3 elements to itself but expects to receive 2"));
  EXPECT_THAT(g->exchangeCounts({-1}).status().message(),
              HasSubstr("count -1 for rank 0 is outside"));

  EXPECT_THAT(g->send(a, 1).message(),
              HasSubstr("peer 1 is not a rank of the group [0, 1)"));
  EXPECT_THAT(g->send(a, 0, 40000).message(),
              HasSubstr("tag 40000 is outside [0, 32767]"));
  EXPECT_THAT(g->broadcast(absl::MakeSpan(a), 2).message(),
              HasSubstr("root 2 is not a rank of the group"));
  // Argument errors are the caller's: the world stays usable.
  EXPECT_TRUE(world->healthy());
}

/// The bits of `values`, for comparing BF16 buffers.
std::vector<uint16_t> bitsOf(const std::vector<Bf16> &values) {
  std::vector<uint16_t> bits;
  for (Bf16 value : values)
    bits.push_back(value.bits);
  return bits;
}

TEST(LocalWorld, Bf16CollectivesOfOneRankKeepTheBits) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {"dp", "tp"});
  // 1.5, -2, a subnormal, -0, infinity.
  const std::vector<Bf16> data = {
      {0x3fc0}, {0xc000}, {0x0001}, {0x8000}, {0x7f80}};
  const std::vector<uint16_t> bits = bitsOf(data);

  std::vector<Bf16> summed = data;
  ASSERT_TRUE(g->allReduceSum(absl::MakeSpan(summed)).ok());
  EXPECT_EQ(bitsOf(summed), bits);
  std::vector<Bf16> gathered(5);
  ASSERT_TRUE(g->allGather(data, absl::MakeSpan(gathered)).ok());
  EXPECT_EQ(bitsOf(gathered), bits);
  std::vector<Bf16> scattered(5);
  ASSERT_TRUE(g->reduceScatterSum(data, absl::MakeSpan(scattered)).ok());
  EXPECT_EQ(bitsOf(scattered), bits);

  std::vector<Bf16> out(6, Bf16{0x1234});
  std::vector<int64_t> sendCounts = {3}, sendOffsets = {2}, recvCounts = {3},
                       recvOffsets = {1};
  ASSERT_TRUE(g->allToAll(data, sendCounts, sendOffsets, absl::MakeSpan(out),
                          recvCounts, recvOffsets)
                  .ok());
  EXPECT_THAT(bitsOf(out),
              ElementsAre(0x1234, 0x0001, 0x8000, 0x7f80, 0x1234, 0x1234));

  std::vector<Bf16> received(5);
  ASSERT_TRUE(g->send(data, 0, 3).ok());
  ASSERT_TRUE(g->recv(absl::MakeSpan(received), 0, 3).ok());
  EXPECT_EQ(bitsOf(received), bits);
  std::vector<Bf16> broadcast = data;
  ASSERT_TRUE(g->broadcast(absl::MakeSpan(broadcast), 0).ok());
  EXPECT_EQ(bitsOf(broadcast), bits);
}

TEST(LocalWorld, Bf16MessagesAreTwoBytesAnElement) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {});
  // Four BF16 elements are the 8 bytes of two fp32 words: a receive of two
  // floats takes them whole.
  ASSERT_TRUE(
      g->send(std::vector<Bf16>{{0x3f80}, {0x4000}, {0x4040}, {0x4080}}, 0)
          .ok());
  std::vector<float> words(2);
  ASSERT_TRUE(g->recv(absl::MakeSpan(words), 0).ok());
  std::vector<uint16_t> halves(4);
  std::memcpy(halves.data(), words.data(), sizeof(uint16_t) * 4);
  EXPECT_THAT(halves, ElementsAre(0x3f80, 0x4000, 0x4040, 0x4080));
}

TEST(LocalWorld, Bf16ErrorsNameTheType) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {"tp"});
  std::vector<Bf16> a(4), b(4);
  EXPECT_THAT(
      g->allGather(absl::MakeConstSpan(a).first(2), absl::MakeSpan(b))
          .message(),
      HasSubstr("allGather of 2 bf16 on group {tp} of dp=1 x tp=1: the output "
                "has 4 elements, expected 1 x 2"));
  EXPECT_THAT(g->reduceScatterSum(absl::MakeConstSpan(a).first(3),
                                  absl::MakeSpan(b).first(2))
                  .message(),
              HasSubstr("reduceScatterSum of 3 bf16 on group {tp}"));
  std::vector<int64_t> two = {2}, three = {3}, zero = {0};
  EXPECT_THAT(
      g->allToAll(a, three, zero, absl::MakeSpan(b), two, zero).message(),
      HasSubstr("allToAll of bf16 on group {tp}"));
}

TEST(LocalWorld, WrongSizedReceiveIsAnError) {
  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {});
  ASSERT_TRUE(g->send(std::vector<int32_t>{1, 2, 3}, 0).ok());
  std::vector<int32_t> small(2);
  absl::Status status = g->recv(absl::MakeSpan(small), 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("received 3 elements from group rank 0 (tag 0) but "
                        "expected 2"));
  EXPECT_FALSE(world->healthy());
}

TEST(LocalWorld, WaitHasADeadline) {
  std::unique_ptr<World> world = localWorld();
  world->setTimeout(absl::Milliseconds(100));
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {"dp"});
  EXPECT_EQ(g->timeout(), absl::Milliseconds(100));
  std::vector<float> never(3);
  absl::Time start = absl::Now();
  absl::Status status = g->recv(absl::MakeSpan(never), 0, 5);
  absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              HasSubstr("recv of 3 f32 from group rank 0 on group {dp} of "
                        "dp=1 x tp=1 (group rank 0) did not complete: waited"));
  EXPECT_THAT(status.message(), HasSubstr("MOE_COMM_TIMEOUT_S"));
  EXPECT_GE(waited, absl::Milliseconds(100));
  EXPECT_LT(waited, absl::Seconds(5));

  // The world is broken now: new work is refused, not attempted.
  EXPECT_FALSE(world->healthy());
  EXPECT_THAT(world->failure(), HasSubstr("did not complete"));
  absl::Status refused = g->barrier();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(),
              HasSubstr("barrier on group {dp} of dp=1 x tp=1: the world can "
                        "no longer communicate"));
  EXPECT_EQ(world->group(kUnitMesh, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(LocalWorld, RequestsCompleteAndMove) {
  Request empty;
  EXPECT_TRUE(empty.done());
  EXPECT_TRUE(*empty.test());
  EXPECT_TRUE(empty.wait().ok());

  std::unique_ptr<World> world = localWorld();
  std::unique_ptr<Group> g = groupOf(*world, kUnitMesh, {});
  std::vector<int32_t> in = {3}, out = {0};
  absl::StatusOr<Request> started = g->startAllGather(in, absl::MakeSpan(out));
  ASSERT_TRUE(started.ok());
  Request moved = std::move(*started);
  EXPECT_TRUE(moved.wait().ok());
  EXPECT_TRUE(moved.done());
  EXPECT_THAT(out, ElementsAre(3));
  // Waiting twice returns the same result.
  EXPECT_TRUE(moved.wait().ok());
}

TEST(Timeout, FromTheEnvironment) {
  unsetenv("MOE_COMM_TIMEOUT_S");
  EXPECT_EQ(*timeoutFromEnvironment(), absl::Seconds(300));
  setenv("MOE_COMM_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(*timeoutFromEnvironment(), absl::Milliseconds(2500));
  {
    std::unique_ptr<World> world = localWorld();
    EXPECT_EQ(world->timeout(), absl::Milliseconds(2500));
  }
  for (const char *bad : {"abc", "0", "-3", "inf", ""}) {
    setenv("MOE_COMM_TIMEOUT_S", bad, 1);
    absl::StatusOr<absl::Duration> timeout = timeoutFromEnvironment();
    EXPECT_FALSE(timeout.ok()) << bad;
    EXPECT_THAT(timeout.status().message(),
                HasSubstr("MOE_COMM_TIMEOUT_S must be a positive number of "
                          "seconds"));
    EXPECT_FALSE(World::local().ok());
  }
  unsetenv("MOE_COMM_TIMEOUT_S");
}

TEST(PackedOffsets, AreAnExclusivePrefixSum) {
  EXPECT_THAT(packedOffsets(std::vector<int64_t>{3, 0, 2, 5}),
              ElementsAre(0, 3, 3, 5));
  EXPECT_TRUE(packedOffsets({}).empty());
}

} // namespace
