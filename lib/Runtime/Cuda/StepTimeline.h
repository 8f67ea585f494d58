//===- StepTimeline.h - a step's GPU spans for moe-run --trace --*- C++ -*-===//
//
// Private to the CUDA backend. The CPU records a span as its kernel runs;
// on the GPU a kernel runs after the host has moved on, so a span is two
// timing events around the work on its stream, and the spans are written to
// the trace once the step has drained: each at the host time of the step's
// origin event plus its events' elapsed time from it. The origin is
// recorded on the idle compute stream at the step's start (the previous
// step ended with a wait), so it marks that host time to within a launch.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_STEPTIMELINE_H
#define MOE_LIB_RUNTIME_CUDA_STEPTIMELINE_H

#include "EventPool.h"

#include "moe/Runtime/IO/Trace.h"

#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace moe::rt::cuda {

class StepTimeline {
public:
  explicit StepTimeline(io::Trace &trace) : trace(trace) {}
  ~StepTimeline();
  StepTimeline(const StepTimeline &) = delete;
  StepTimeline &operator=(const StepTimeline &) = delete;

  /// A step starts on `stream`, idle.
  absl::Status begin(cudaStream_t stream);
  /// Records the start of a span on `stream`; end(span) its end, on the
  /// same stream. Spans of several streams may interleave.
  absl::StatusOr<size_t> start(cudaStream_t stream, io::TraceTrack track,
                               std::string name);
  absl::Status end(size_t span, cudaStream_t stream);
  /// Forgets the spans since begin() (a failed step).
  void discard();
  /// After the step's last wait: every span recorded since begin() goes to
  /// the trace.
  absl::Status write();

private:
  struct Span {
    io::TraceTrack track;
    std::string name;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  io::Trace &trace;
  cudaEvent_t origin = nullptr;
  io::Trace::Clock::time_point hostOrigin;
  std::vector<Span> spans;
  EventPool events;
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_STEPTIMELINE_H
