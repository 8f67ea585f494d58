//===- PeerReportTest.cpp - what a stuck wait says about its peers --------===//
//
// The answers are built by hand here; test/comm/timeout.test and
// test/moe-run/faults.test get them from real probes between ranks.
//
//===----------------------------------------------------------------------===//
#include "Probe.h"

#include "gtest/gtest.h"

using namespace moe::rt::comm::detail;

namespace {

const absl::Duration kGrace = absl::Seconds(2);
const std::string kSilent = "did not answer within 2.0 s (hung, dead or busy "
                            "outside the communication layer)";

/// An allReduceSum, collective #5 of group 3 {0, 1, 2, 3}, seen from rank 0.
StuckWait allReduce() {
  StuckWait wait;
  wait.groupId = 3;
  wait.sequence = 4;
  wait.collective = "allReduceSum of 16 f32";
  wait.members = {0, 1, 2, 3};
  wait.self = 0;
  return wait;
}

PeerState waitingIn(int64_t group, int64_t sequence, std::string collective,
                    int64_t entered, std::string groupName = "{dp}") {
  PeerState peer;
  peer.entered = entered;
  peer.waiting = true;
  peer.waitGroup = group;
  peer.waitSequence = sequence;
  peer.collective = std::move(collective);
  peer.groupName = std::move(groupName);
  return peer;
}

TEST(PeerReport, FormatsRankLists) {
  EXPECT_EQ(formatRanks({3}), "rank 3");
  EXPECT_EQ(formatRanks({1, 3}), "ranks 1 and 3");
  EXPECT_EQ(formatRanks({1, 2}), "ranks 1 and 2");
  EXPECT_EQ(formatRanks({0, 1, 2, 3, 5, 7}), "ranks 0-3, 5 and 7");
  EXPECT_EQ(formatRanks({4, 6, 7, 8}), "ranks 4 and 6-8");
}

TEST(PeerReport, NamesTheSilentRankFirst) {
  std::vector<std::optional<PeerState>> answers(4);
  answers[1] = waitingIn(3, 4, "allReduceSum of 16 f32", 5);
  answers[3] = waitingIn(3, 4, "allReduceSum of 16 f32", 5);
  EXPECT_EQ(describePeers(allReduce(), answers, kGrace),
            "rank 2 " + kSilent + "; ranks 1 and 3 are waiting in this "
                                  "collective");
}

TEST(PeerReport, TellsBehindAheadAndMismatched) {
  std::vector<std::optional<PeerState>> answers(4);
  answers[1] = waitingIn(3, 2, "barrier", 3);
  answers[2] = waitingIn(3, 6, "allGather of 8 f32", 7);
  answers[3] = waitingIn(3, 4, "broadcast of 4 f32 from group rank 0", 5);
  EXPECT_EQ(describePeers(allReduce(), answers, kGrace),
            "rank 1 is behind, in collective #3 of this group: barrier; "
            "rank 2 is ahead, in collective #7 of this group: allGather of 8 "
            "f32; rank 3 is in broadcast of 4 f32 from group rank 0 instead "
            "(collective #5 of this group: the ranks issued different "
            "collectives)");
}

TEST(PeerReport, SaysWhereRanksOutsideTheCollectiveWait) {
  std::vector<std::optional<PeerState>> answers(6);
  // Rank 1 has entered 4 collectives of the group (this is #5) and waits
  // on another group; ranks 2 and 3 passed it; rank 5, outside the group,
  // is silent; rank 4 (outside, answering) is not mentioned.
  answers[1] = waitingIn(7, 0, "barrier", 4, "{tp}");
  answers[2] = waitingIn(7, 1, "allReduceSum of 2 f32", 5, "{tp}");
  answers[3] = waitingIn(7, 1, "allReduceSum of 2 f32", 5, "{tp}");
  answers[4] = waitingIn(7, 1, "allReduceSum of 2 f32", -1, "{tp}");
  EXPECT_EQ(describePeers(allReduce(), answers, kGrace),
            "rank 1 has not reached this collective (#5 of this group; it "
            "entered 4) and is waiting in barrier on group {tp}; ranks 2 and "
            "3 have passed this collective and are waiting in allReduceSum of "
            "2 f32 on group {tp}; outside the group, rank 5 " +
                kSilent);
}

TEST(PeerReport, RanksNotWaitingOrWithoutTheGroup) {
  std::vector<std::optional<PeerState>> answers(4);
  PeerState idle;
  idle.entered = 2;
  answers[1] = idle;
  PeerState stranger;
  answers[2] = stranger; // entered -1: it has not created the group
  // A transfer of the same group is not one of its collectives.
  answers[3] = waitingIn(3, -1, "recv of 4 f32 from group rank 0", 4);
  EXPECT_EQ(describePeers(allReduce(), answers, kGrace),
            "rank 1 has not reached this collective (#5 of this group; it "
            "entered 2) and is not waiting for a transfer; rank 2 has not "
            "created this group and is not waiting for a transfer; rank 3 "
            "has not reached this collective (#5 of this group; it entered 4) "
            "and is waiting in recv of 4 f32 from group rank 0 on group {dp}");
}

TEST(PeerReport, PointToPointNamesThePeer) {
  StuckWait recv;
  recv.groupId = 1;
  recv.sequence = -1;
  recv.peer = 0;
  recv.collective = "recv of 64 f32 from group rank 0";
  recv.members = {0, 1};
  recv.self = 1;
  std::vector<std::optional<PeerState>> answers(3);
  EXPECT_EQ(describePeers(recv, answers, kGrace),
            "the peer, rank 0 " + kSilent + "; of the other ranks, rank 2 " +
                kSilent);
  answers[0] = waitingIn(1, -1, "recv of 64 f32 from group rank 1", 0,
                         "{pp} of pp=2");
  answers[2] = PeerState{};
  EXPECT_EQ(describePeers(recv, answers, kGrace),
            "the peer, rank 0 is waiting in recv of 64 f32 from group rank 1 "
            "on group {pp} of pp=2");
}

} // namespace
