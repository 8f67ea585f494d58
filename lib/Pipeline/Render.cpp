//===- Render.cpp - Chrome trace and text views of a timeline -------------===//
//
// Both views exist for humans checking a schedule: the Chrome trace for
// zooming in Perfetto, the text view for a terminal or a test log. Neither is
// parsed back, so they only need to be valid, not round-trippable.
//
//===----------------------------------------------------------------------===//

#include "moe/Pipeline/Schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace moe::pipeline {
namespace {

// One cost unit in trace microseconds; makes unit costs read as 1 ms.
constexpr double kMicrosPerUnit = 1000;

std::string formatNumber(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", x);
  return buf;
}

char symbolOf(const Action &a) {
  char c = toString(a.kind)[0];
  return a.chunk % 2 ? char(std::tolower(static_cast<unsigned char>(c))) : c;
}

} // namespace

std::string toChromeTrace(const Timeline &timeline) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto comma = [&] {
    if (!first)
      out += ",";
    first = false;
  };
  int p = int(timeline.ranks.size());
  for (int r = 0; r < p; ++r) {
    comma();
    out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" +
           std::to_string(r) + ",\"args\":{\"name\":\"rank " +
           std::to_string(r) + "\"}}";
    for (const TimedAction &t : timeline.ranks[r]) {
      const Action &a = t.action;
      comma();
      out += "{\"name\":\"" + std::string(toString(a.kind)) +
             std::to_string(a.microbatch) + "\",\"cat\":\"" +
             std::string(toString(a.kind)) +
             "\",\"ph\":\"X\",\"pid\":0,"
             "\"tid\":" +
             std::to_string(r) +
             ",\"ts\":" + formatNumber(t.start * kMicrosPerUnit) +
             ",\"dur\":" + formatNumber((t.end - t.start) * kMicrosPerUnit) +
             ",\"args\":{\"microbatch\":" + std::to_string(a.microbatch) +
             ",\"chunk\":" + std::to_string(a.chunk) +
             ",\"stage\":" + std::to_string(a.chunk * p + a.rank) + "}}";
    }
  }
  out += "]}";
  return out;
}

std::string toText(const Timeline &timeline, int maxWidth) {
  double shortest = timeline.makespan;
  for (const auto &rank : timeline.ranks)
    for (const TimedAction &t : rank)
      if (t.end > t.start)
        shortest = std::min(shortest, t.end - t.start);
  // One column per shortest action when that fits, so unit-cost schedules
  // draw exactly; otherwise squeeze into maxWidth columns.
  int columns = 0;
  if (timeline.makespan > 0 && shortest > 0)
    columns = int(std::min<double>(
        std::max(maxWidth, 1), std::ceil(timeline.makespan / shortest - 1e-9)));
  double width = columns > 0 ? timeline.makespan / columns : 1;

  std::string out;
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    const std::vector<TimedAction> &rank = timeline.ranks[r];
    out += "rank " + std::to_string(r) + " |";
    size_t next = 0;
    for (int c = 0; c < columns; ++c) {
      // Sample each column at its middle; actions are sorted by time.
      double time = (c + 0.5) * width;
      while (next < rank.size() && rank[next].end <= time)
        ++next;
      bool busy = next < rank.size() && rank[next].start <= time;
      out += busy ? symbolOf(rank[next].action) : '.';
    }
    out += "|\n";
  }
  return out;
}

} // namespace moe::pipeline
