//===- DevicePipeline.h - pipelined steps on the GPU ------------*- C++ -*-===//
//
// Private to the CUDA backend: the PipelineStep::Device of the GPU. The
// shared runner (moe/Runtime/Engine/PipelineStep.h) walks the schedule;
// this gives it device memory (cudaMalloc, kept until the backend goes),
// copies on the step's stream (a download waits, polling the NCCL watch),
// the device instructions, and the gradient sums as fp32 kernels that add
// and divide element by element, as the CPU does. Its slots' addresses are
// the backend's `pointers` while they run, so the dispatch, dumps and
// readBuffer see the running slot.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_DEVICEPIPELINE_H
#define MOE_LIB_RUNTIME_CUDA_DEVICEPIPELINE_H

#include "DeviceStep.h"
#include "EventPool.h"
#include "StepTimeline.h"

#include "moe/Runtime/Backend/Backend.h"
#include "moe/Runtime/Engine/PipelineStep.h"

#include <tuple>
#include <vector>

namespace moe::rt::cuda {

class DevicePipeline final : public engine::PipelineStep::Device {
public:
  /// `backendPointers` is the vector the steps' DeviceStep reads; the
  /// runner's own (`runnerPointers`) are copied into it when they change.
  DevicePipeline(std::vector<void *> &backendPointers, bool profiling,
                 StepTimeline *timeline)
      : backendPointers(backendPointers), profiling(profiling),
        timeline(timeline) {}
  ~DevicePipeline() override;

  /// The running step: its DeviceStep (whose pointers are backendPointers),
  /// the runner's pointers and the communication stream (several ranks);
  /// null between steps.
  void setStep(const DeviceStep *step,
               const std::vector<uint8_t *> *runnerPointers,
               CommStream *commStream) {
    context = step;
    runner = runnerPointers;
    comm = commStream;
  }
  /// --profile: adds the time of every instruction run since the last call
  /// to `times` (waits for the stream).
  absl::Status addTimes(OpcodeTimes &times);

  absl::StatusOr<uint8_t *> allocate(uint64_t bytes,
                                     const std::string &what) override;
  absl::Status upload(uint8_t *to, const void *from, uint64_t bytes) override;
  absl::Status download(void *to, const uint8_t *from, uint64_t bytes) override;
  absl::Status run(size_t index) override;
  absl::Status runOptimizer(size_t index, comm::Group *stages,
                            const std::vector<bool> &foreign) override;
  absl::Status zero(float *sum, int64_t n) override;
  absl::Status accumulate(float *sum, const float *add, int64_t n) override;
  absl::Status average(float *into, const float *sum, int64_t n,
                       float count) override;
  void pointersChanged() override;

  /// Device memory allocated for slots and sums.
  uint64_t bytesAllocated() const { return allocated; }

private:
  absl::Status runOn(const DeviceStep &step, size_t index);

  std::vector<void *> &backendPointers;
  bool profiling;
  /// --trace: the step's spans (null without).
  StepTimeline *timeline;
  CommStream *comm = nullptr;
  const DeviceStep *context = nullptr;
  const std::vector<uint8_t *> *runner = nullptr;
  std::vector<void *> owned;
  uint64_t allocated = 0;
  /// --profile: each instruction run, between its two events.
  std::vector<std::tuple<size_t, cudaEvent_t, cudaEvent_t>> timed;
  EventPool events;
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_DEVICEPIPELINE_H
