//===- Trace.h - a per-rank timeline as a Chrome trace ----------*- C++ -*-===//
//
// What `moe-run --trace` writes: one rank's step as spans on two tracks,
// compute (kernels) and communication (collectives, expert dispatch and
// combine, pipeline sends and receives), in the Chrome trace event format
// that Perfetto and chrome://tracing open. Spans on the two tracks that
// overlap in time are communication hidden behind compute.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_TRACE_H
#define MOE_RUNTIME_IO_TRACE_H

#include "absl/status/status.h"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace moe::rt::io {

/// Where a span goes: the step's kernels; the collectives and exchanges the
/// step waits for (and an expert exchange's thread); the communication
/// thread of --async-collectives, which may run beside a collective of the
/// step's own on another group.
enum class TraceTrack : uint8_t {
  Compute = 0,
  Communication = 1,
  AsyncCommunication = 2
};

class Trace {
public:
  using Clock = std::chrono::steady_clock;

  /// Spans of rank `rank`; times count from construction.
  explicit Trace(int rank);

  Clock::time_point now() const { return Clock::now(); }
  /// Records a span from `start` to now; callable from several threads.
  void span(TraceTrack track, std::string name, Clock::time_point start);
  /// Records a span from `start` to `end` (a device's, timed by events).
  void span(TraceTrack track, std::string name, Clock::time_point start,
            Clock::time_point end);

  size_t size() const { return spans.size(); }
  /// The Chrome trace JSON of every span so far.
  std::string toJson() const;
  /// Writes toJson() to `path` (atomically).
  absl::Status write(const std::string &path) const;

private:
  struct Span {
    TraceTrack track;
    std::string name;
    double startUs, durationUs;
  };
  int rank;
  Clock::time_point origin;
  std::mutex mutex; // guards spans
  std::vector<Span> spans;
};

/// Records a span from construction to destruction; nothing without a
/// trace.
class TraceScope {
public:
  TraceScope(Trace *trace, TraceTrack track, std::string name)
      : trace(trace), track(track), name(std::move(name)),
        start(trace ? trace->now() : Trace::Clock::time_point()) {}
  ~TraceScope() {
    if (trace)
      trace->span(track, std::move(name), start);
  }
  TraceScope(const TraceScope &) = delete;
  TraceScope &operator=(const TraceScope &) = delete;

private:
  Trace *trace;
  TraceTrack track;
  std::string name;
  Trace::Clock::time_point start;
};

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_TRACE_H
