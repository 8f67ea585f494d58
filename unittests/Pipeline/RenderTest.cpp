//===- RenderTest.cpp - Chrome trace and text rendering -------------------===//

#include "moe/Pipeline/Schedule.h"

#include "nlohmann/json.hpp"
#include "gtest/gtest.h"

using namespace moe::pipeline;

namespace {

Timeline timelineOf(ScheduleKind kind, int p, int m, int v = 1) {
  ScheduleOptions opts;
  opts.stages = p;
  opts.microbatches = m;
  opts.virtualStages = v;
  ErrorOr<Schedule> s = buildSchedule(kind, opts);
  EXPECT_TRUE(s) << s.getError();
  ErrorOr<Timeline> t = simulate(*s, opts);
  EXPECT_TRUE(t) << t.getError();
  return *t;
}

TEST(PipelineRenderTest, ChromeTraceIsValidJson) {
  Timeline t = timelineOf(ScheduleKind::ZeroBubble, 4, 8);
  nlohmann::json trace = nlohmann::json::parse(toChromeTrace(t));
  ASSERT_TRUE(trace.contains("traceEvents"));
  int complete = 0, metadata = 0;
  for (const auto &event : trace["traceEvents"]) {
    if (event["ph"] == "M") {
      ++metadata;
      continue;
    }
    ASSERT_EQ(event["ph"], "X");
    ++complete;
    EXPECT_EQ(event["pid"], 0);
    int tid = event["tid"];
    EXPECT_GE(tid, 0);
    EXPECT_LT(tid, 4);
    std::string name = event["name"];
    ASSERT_FALSE(name.empty());
    EXPECT_NE(std::string("FBW").find(name[0]), std::string::npos) << name;
    EXPECT_EQ(name.substr(1),
              std::to_string(event["args"]["microbatch"].get<int>()));
    // Unit costs: each pass lasts 1000 us.
    EXPECT_NEAR(event["dur"].get<double>(), 1000, 1e-6);
  }
  EXPECT_EQ(complete, 3 * 4 * 8);
  EXPECT_EQ(metadata, 4);
}

TEST(PipelineRenderTest, ChromeTraceTimesInMicroseconds) {
  Timeline t = timelineOf(ScheduleKind::OneFOneB, 2, 2);
  nlohmann::json trace = nlohmann::json::parse(toChromeTrace(t));
  double end = 0;
  int complete = 0;
  for (const auto &event : trace["traceEvents"]) {
    if (event["ph"] != "X")
      continue;
    ++complete;
    end = std::max(end, event["ts"].get<double>() + event["dur"].get<double>());
  }
  EXPECT_EQ(complete, 2 * 2 * 2);
  EXPECT_NEAR(end, t.makespan * 1000, 1e-6);
}

TEST(PipelineRenderTest, TextDrawsOneLinePerRank) {
  Timeline t = timelineOf(ScheduleKind::OneFOneB, 2, 2);
  // F = 1, fused B = 2, so one column per unit of time.
  EXPECT_EQ(toText(t), "rank 0 |FF..BB.BB|\n"
                       "rank 1 |.FBBFBB..|\n");
  Timeline zb = timelineOf(ScheduleKind::ZeroBubble, 4, 8);
  std::string text = toText(zb);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_NE(text.find('W'), std::string::npos);
  Timeline inter = timelineOf(ScheduleKind::Interleaved1F1B, 2, 4, 2);
  EXPECT_NE(toText(inter).find('f'), std::string::npos);
  // Long timelines are squeezed to maxWidth columns.
  Timeline wide = timelineOf(ScheduleKind::GPipe, 2, 100);
  std::string line = toText(wide, 50);
  EXPECT_EQ(line.find('\n'), std::string("rank 0 |").size() + 50 + 1);
}

} // namespace
