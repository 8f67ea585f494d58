//===- Trace.cpp - a per-rank timeline as a Chrome trace ------------------===//

#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/IO/File.h"

#include "nlohmann/json.hpp"

namespace moe::rt::io {

Trace::Trace(int rank) : rank(rank), origin(Clock::now()) {}

void Trace::span(TraceTrack track, std::string name, Clock::time_point start) {
  span(track, std::move(name), start, Clock::now());
}

void Trace::span(TraceTrack track, std::string name, Clock::time_point start,
                 Clock::time_point end) {
  auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  std::lock_guard<std::mutex> lock(mutex);
  spans.push_back({track, std::move(name), us(start), us(end) - us(start)});
}

std::string Trace::toJson() const {
  nlohmann::json events = nlohmann::json::array();
  const char *trackNames[] = {"compute", "communication",
                              "communication (async)"};
  // The asynchronous track only when something ran there.
  int tracks = 2;
  for (const Span &span : spans)
    if (span.track == TraceTrack::AsyncCommunication)
      tracks = 3;
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (int t = 0; t < tracks; ++t)
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", rank},
                      {"tid", t},
                      {"args", {{"name", trackNames[t]}}}});
  for (const Span &span : spans)
    events.push_back({{"ph", "X"},
                      {"name", span.name},
                      {"cat", trackNames[static_cast<int>(span.track)]},
                      {"pid", rank},
                      {"tid", static_cast<int>(span.track)},
                      {"ts", span.startUs},
                      {"dur", span.durationUs}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}
      .dump();
}

absl::Status Trace::write(const std::string &path) const {
  absl::StatusOr<AtomicFile> file = AtomicFile::create(path);
  if (!file.ok())
    return file.status();
  if (absl::Status s = file->write(toJson() + "\n"); !s.ok())
    return s;
  return file->commit();
}

} // namespace moe::rt::io
