//===- StepTimeline.cpp - a step's GPU spans for moe-run --trace ----------===//
#include "StepTimeline.h"

#include "CudaStatus.h"

#include <chrono>

namespace moe::rt::cuda {

StepTimeline::~StepTimeline() {
  discard();
  if (origin)
    cudaEventDestroy(origin);
}

absl::Status StepTimeline::begin(cudaStream_t stream) {
  if (!origin)
    MOE_CUDA_OK(cudaEventCreate(&origin));
  hostOrigin = trace.now();
  MOE_CUDA_OK(cudaEventRecord(origin, stream));
  return absl::OkStatus();
}

absl::StatusOr<size_t> StepTimeline::start(cudaStream_t stream,
                                           io::TraceTrack track,
                                           std::string name) {
  absl::StatusOr<cudaEvent_t> e = events.take();
  if (!e.ok())
    return e.status();
  spans.push_back({track, std::move(name), *e, nullptr});
  MOE_CUDA_OK(cudaEventRecord(*e, stream));
  return spans.size() - 1;
}

absl::Status StepTimeline::end(size_t span, cudaStream_t stream) {
  if (span >= spans.size() || spans[span].end)
    return absl::InternalError("step timeline: a span ended twice");
  absl::StatusOr<cudaEvent_t> e = events.take();
  if (!e.ok())
    return e.status();
  spans[span].end = *e;
  MOE_CUDA_OK(cudaEventRecord(*e, stream));
  return absl::OkStatus();
}

void StepTimeline::discard() {
  for (Span &span : spans) {
    events.give(span.start);
    events.give(span.end);
  }
  spans.clear();
}

absl::Status StepTimeline::write() {
  absl::Status status;
  auto at = [&](cudaEvent_t e) {
    float ms = 0;
    if (status.ok())
      status = cudaStatus(cudaEventElapsedTime(&ms, origin, e),
                          "cudaEventElapsedTime");
    return hostOrigin + std::chrono::duration_cast<io::Trace::Clock::duration>(
                            std::chrono::duration<double, std::milli>(ms));
  };
  for (Span &span : spans) {
    if (span.end)
      trace.span(span.track, std::move(span.name), at(span.start),
                 at(span.end));
    events.give(span.start);
    events.give(span.end);
  }
  spans.clear();
  return status;
}

} // namespace moe::rt::cuda
