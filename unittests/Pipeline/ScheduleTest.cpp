//===- ScheduleTest.cpp - pipeline schedule construction and timing -------===//
//
// Checks the schedules against the closed forms they are known by (bubble
// (p-1)/(m+p-1) for GPipe and 1F1B, the 1F1B memory bound) and the claims
// that justify the fancier ones (ZB and interleaving shrink the bubble).
//
//===----------------------------------------------------------------------===//

#include "moe/Pipeline/Schedule.h"

#include "gtest/gtest.h"

#include <algorithm>

#include <map>
#include <tuple>

using namespace moe::pipeline;

namespace {

ScheduleOptions options(int p, int m, int v = 1) {
  ScheduleOptions opts;
  opts.stages = p;
  opts.microbatches = m;
  opts.virtualStages = v;
  return opts;
}

Timeline run(ScheduleKind kind, const ScheduleOptions &opts) {
  ErrorOr<Schedule> schedule = buildSchedule(kind, opts);
  EXPECT_TRUE(schedule) << schedule.getError();
  if (!schedule)
    return {};
  ErrorOr<Timeline> timeline = simulate(*schedule, opts);
  EXPECT_TRUE(timeline) << timeline.getError();
  return timeline ? *timeline : Timeline{};
}

// Every dependency and the per-rank order must hold in the timeline.
void expectDependenciesHold(const Timeline &t, int m) {
  int p = t.stages, numStages = p * t.virtualStages;
  using Key = std::tuple<int, int>; // (model stage, microbatch)
  std::map<Key, const TimedAction *> f, b, w;
  for (int r = 0; r < p; ++r) {
    double last = 0;
    for (const TimedAction &ta : t.ranks[r]) {
      EXPECT_GE(ta.start, last) << "rank " << r << " overlaps";
      EXPECT_GT(ta.end, ta.start);
      last = ta.end;
      Key key{ta.action.chunk * p + r, ta.action.microbatch};
      auto &map = ta.action.kind == ActionKind::Forward          ? f
                  : ta.action.kind == ActionKind::BackwardWeight ? w
                                                                 : b;
      EXPECT_TRUE(map.emplace(key, &ta).second) << "duplicate action";
    }
  }
  for (int s = 0; s < numStages; ++s) {
    for (int i = 0; i < m; ++i) {
      Key here{s, i}, up{s - 1, i}, down{s + 1, i};
      ASSERT_TRUE(f.count(here) && b.count(here));
      if (s > 0) {
        EXPECT_GE(f[here]->start, f[up]->end);
      }
      EXPECT_GE(b[here]->start, f[here]->end);
      if (s + 1 < numStages) {
        EXPECT_GE(b[here]->start, b[down]->end);
      }
      if (w.count(here)) {
        EXPECT_GE(w[here]->start, b[here]->end);
      }
    }
  }
}

const std::pair<int, int> kShapes[] = {{1, 1}, {2, 4},  {4, 8}, {4, 4},
                                       {3, 7}, {8, 16}, {2, 2}};

TEST(PipelineScheduleTest, GPipeAndOneFOneBBubbleMatchesClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (auto [p, m] : kShapes) {
      Timeline t = run(kind, options(p, m));
      SCOPED_TRACE(std::string(toString(kind)) + " p=" + std::to_string(p) +
                   " m=" + std::to_string(m));
      EXPECT_NEAR(t.bubbleFraction, double(p - 1) / (m + p - 1), 1e-9);
      // F = 1 and fused B = 2: (m + p - 1) slots of F + B.
      EXPECT_NEAR(t.makespan, 3.0 * (m + p - 1), 1e-9);
    }
  }
}

TEST(PipelineScheduleTest, ZeroBubbleBeatsOneFOneB) {
  for (auto [p, m] : kShapes) {
    if (p < 2 || m < p)
      continue;
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    Timeline zb = run(ScheduleKind::ZeroBubble, options(p, m));
    Timeline base = run(ScheduleKind::OneFOneB, options(p, m));
    EXPECT_LT(zb.bubbleFraction, base.bubbleFraction);
    EXPECT_LT(zb.makespan, base.makespan);
    // ZB-H1's makespan with F = B = W = 1: m(F+B+W) + (p-1)(F+B-W).
    EXPECT_NEAR(zb.makespan, 3.0 * m + (p - 1), 1e-9);
    expectDependenciesHold(zb, m);
  }
}

TEST(PipelineScheduleTest, ZeroBubbleWithUnequalCosts) {
  ScheduleOptions opts = options(4, 8);
  opts.forwardCost = 1;
  opts.backwardInputCost = 1.3;
  opts.backwardWeightCost = 0.7;
  Timeline zb = run(ScheduleKind::ZeroBubble, opts);
  Timeline base = run(ScheduleKind::OneFOneB, opts);
  EXPECT_LT(zb.bubbleFraction, base.bubbleFraction);
  expectDependenciesHold(zb, 8);
}

TEST(PipelineScheduleTest, InterleavedBeatsOneFOneB) {
  for (auto [p, m] : kShapes) {
    if (p < 2 || m % p != 0)
      continue;
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    Timeline inter = run(ScheduleKind::Interleaved1F1B, options(p, m, 2));
    Timeline base = run(ScheduleKind::OneFOneB, options(p, m));
    EXPECT_LT(inter.bubbleFraction, base.bubbleFraction);
    // Megatron's closed form: the (p-1)(F+B) ramp shrinks by v.
    EXPECT_NEAR(inter.makespan, 3.0 * m + 3.0 * (p - 1) / 2, 1e-9);
    expectDependenciesHold(inter, m);
  }
  // v = 4 runs without deadlock too.
  Timeline v4 = run(ScheduleKind::Interleaved1F1B, options(4, 8, 4));
  expectDependenciesHold(v4, 8);
}

TEST(PipelineScheduleTest, EveryActionOnceAndDependenciesHold) {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved1F1B, ScheduleKind::ZeroBubble}) {
    for (auto [p, m] : kShapes) {
      int v = kind == ScheduleKind::Interleaved1F1B ? 2 : 1;
      if (kind == ScheduleKind::Interleaved1F1B && m % p != 0)
        continue;
      SCOPED_TRACE(std::string(toString(kind)) + " p=" + std::to_string(p) +
                   " m=" + std::to_string(m));
      ErrorOr<Schedule> s = buildSchedule(kind, options(p, m, v));
      ASSERT_TRUE(s) << s.getError();
      EXPECT_FALSE(verifySchedule(*s));
      size_t count = 0;
      for (const auto &order : s->ranks)
        count += order.size();
      size_t perPass = kind == ScheduleKind::ZeroBubble ? 3 : 2;
      EXPECT_EQ(count, perPass * p * v * m);
      Timeline t = run(kind, options(p, m, v));
      expectDependenciesHold(t, m);
    }
  }
}

TEST(PipelineScheduleTest, InFlightActivations) {
  for (auto [p, m] : kShapes) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    ErrorOr<Schedule> oneF =
        buildSchedule(ScheduleKind::OneFOneB, options(p, m));
    ErrorOr<Schedule> gpipe = buildSchedule(ScheduleKind::GPipe, options(p, m));
    ErrorOr<Schedule> zb =
        buildSchedule(ScheduleKind::ZeroBubble, options(p, m));
    ASSERT_TRUE(oneF && gpipe && zb);
    std::vector<int> peak1 = peakInFlight(*oneF), peakG = peakInFlight(*gpipe),
                     peakZ = peakInFlight(*zb);
    for (int r = 0; r < p; ++r) {
      EXPECT_LE(peak1[r], p - r);
      EXPECT_EQ(peak1[r], std::min(p - r, m));
      EXPECT_EQ(peakG[r], m);
      // ZB-H1 puts W off by r B passes on rank r: no rank holds more than
      // 1F1B's rank 0.
      EXPECT_LE(peakZ[r], std::min(p, m));
    }
    EXPECT_EQ(*std::max_element(peakZ.begin(), peakZ.end()),
              *std::max_element(peak1.begin(), peak1.end()));
  }
}

TEST(PipelineScheduleTest, InvalidOptionsAreErrors) {
  EXPECT_FALSE(buildSchedule(ScheduleKind::OneFOneB, options(0, 4)));
  EXPECT_FALSE(buildSchedule(ScheduleKind::OneFOneB, options(2, 0)));
  EXPECT_FALSE(buildSchedule(ScheduleKind::OneFOneB, options(-3, 4)));
  EXPECT_FALSE(buildSchedule(ScheduleKind::GPipe, options(2, 4, 2)));
  EXPECT_FALSE(buildSchedule(ScheduleKind::Interleaved1F1B, options(4, 6, 2)));
  EXPECT_FALSE(buildSchedule(ScheduleKind::Interleaved1F1B, options(4, 8, 0)));
  EXPECT_FALSE(
      buildSchedule(ScheduleKind::OneFOneB, options(1 << 20, 1 << 20)));
  ScheduleOptions bad = options(2, 4);
  bad.forwardCost = 0;
  EXPECT_FALSE(buildSchedule(ScheduleKind::ZeroBubble, bad));
  bad.forwardCost = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(buildSchedule(ScheduleKind::ZeroBubble, bad));
  ErrorOr<Schedule> s =
      buildSchedule(ScheduleKind::Interleaved1F1B, options(4, 6, 2));
  EXPECT_NE(s.getError().find("multiple of stages"), std::string::npos)
      << s.getError();
}

TEST(PipelineScheduleTest, MalformedSchedulesAreErrors) {
  ScheduleOptions opts = options(2, 2);
  ErrorOr<Schedule> s = buildSchedule(ScheduleKind::OneFOneB, opts);
  ASSERT_TRUE(s);

  Schedule duplicate = *s;
  duplicate.ranks[0].push_back(duplicate.ranks[0].front());
  EXPECT_FALSE(simulate(duplicate, opts));

  Schedule wrongRank = *s;
  wrongRank.ranks[0].front().rank = 1;
  EXPECT_FALSE(simulate(wrongRank, opts));

  EXPECT_FALSE(simulate(*s, options(2, 3)));
}

TEST(PipelineScheduleTest, DeadlockIsReported) {
  ScheduleOptions opts = options(2, 2);
  ErrorOr<Schedule> s = buildSchedule(ScheduleKind::OneFOneB, opts);
  ASSERT_TRUE(s);
  // Rank 1 wants microbatch 1's backward before running its forward: the
  // last stage then waits on itself, and rank 0 on rank 1.
  Schedule bad = *s;
  std::vector<Action> &last = bad.ranks[1];
  std::swap(last[2], last[3]); // F0 B0 F1 B1 -> F0 B0 B1 F1
  ErrorOr<Timeline> t = simulate(bad, opts);
  ASSERT_FALSE(t);
  EXPECT_NE(t.getError().find("deadlock"), std::string::npos) << t.getError();
}

} // namespace
