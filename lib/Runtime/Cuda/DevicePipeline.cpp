//===- DevicePipeline.cpp - pipelined steps on the GPU --------------------===//
#include "DevicePipeline.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Cuda/Kernels.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {

DevicePipeline::~DevicePipeline() {
  if (context)
    cudaStreamSynchronize(context->stream);
  for (void *p : owned)
    cudaFree(p);
  for (auto &[index, start, end] : timed) {
    events.give(start);
    events.give(end);
  }
}

absl::StatusOr<uint8_t *> DevicePipeline::allocate(uint64_t bytes,
                                                   const std::string &what) {
  void *memory = nullptr;
  cudaError_t result = cudaMalloc(&memory, bytes > 0 ? bytes : 1);
  if (result != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of GPU memory for ",
                     what, " (", cudaGetErrorString(result), ")"));
  }
  owned.push_back(memory);
  allocated += bytes;
  return static_cast<uint8_t *>(memory);
}

absl::Status DevicePipeline::upload(uint8_t *to, const void *from,
                                    uint64_t bytes) {
  if (!context)
    return absl::InternalError("pipeline: a copy outside a step");
  // From pageable memory the call returns once `from` is staged: the
  // caller may free it at once.
  MOE_CUDA_OK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice,
                              context->stream));
  return absl::OkStatus();
}

absl::Status DevicePipeline::download(void *to, const uint8_t *from,
                                      uint64_t bytes) {
  if (!context)
    return absl::InternalError("pipeline: a copy outside a step");
  return context->staging.read(to, from, bytes, context->stream,
                               context->watch);
}

absl::Status DevicePipeline::runOn(const DeviceStep &step, size_t index) {
  if (step.comm)
    MOE_CUDA_TRY(step.comm->before(step.stream, index));
  cudaEvent_t start = nullptr, end = nullptr;
  if (profiling) {
    absl::StatusOr<cudaEvent_t> first = events.take();
    if (!first.ok())
      return first.status();
    absl::StatusOr<cudaEvent_t> second = events.take();
    if (!second.ok())
      return second.status();
    start = *first, end = *second;
    timed.emplace_back(index, start, end);
    MOE_CUDA_OK(cudaEventRecord(start, step.stream));
  }
  absl::StatusOr<std::optional<size_t>> span = startInstructionSpan(
      timeline, comm, step.stream, step.program.instructions[index]);
  if (!span.ok())
    return span.status();
  MOE_CUDA_TRY(runDeviceInstruction(step, index));
  if (*span)
    MOE_CUDA_TRY(timeline->end(**span, step.stream));
  if (profiling)
    MOE_CUDA_OK(cudaEventRecord(end, step.stream));
  return absl::OkStatus();
}

absl::Status DevicePipeline::run(size_t index) {
  if (!context)
    return absl::InternalError("pipeline: an instruction ran outside a step");
  return runOn(*context, index);
}

absl::Status DevicePipeline::runOptimizer(size_t index, comm::Group *stages,
                                          const std::vector<bool> &foreign) {
  if (!context)
    return absl::InternalError("pipeline: an instruction ran outside a step");
  DeviceStep optimizer = *context;
  optimizer.stageGroup = stages;
  optimizer.foreignGradients = &foreign;
  return runOn(optimizer, index);
}

absl::Status DevicePipeline::zero(float *sum, int64_t n) {
  MOE_CUDA_OK(cudaMemsetAsync(sum, 0, n * sizeof(float), context->stream));
  return absl::OkStatus();
}

absl::Status DevicePipeline::accumulate(float *sum, const float *add,
                                        int64_t n) {
  return cuda::add(sum, add, sum, n, context->stream);
}

absl::Status DevicePipeline::average(float *into, const float *sum, int64_t n,
                                     float count) {
  return divide(sum, count, into, n, context->stream);
}

void DevicePipeline::pointersChanged() {
  if (!runner)
    return;
  for (size_t b = 0; b < runner->size(); ++b)
    backendPointers[b] = (*runner)[b];
}

absl::Status DevicePipeline::addTimes(OpcodeTimes &times) {
  if (timed.empty())
    return absl::OkStatus();
  MOE_CUDA_OK(cudaStreamSynchronize(context ? context->stream : nullptr));
  const Program &program = context->program;
  for (auto &[index, start, end] : timed) {
    float milliseconds = 0;
    MOE_CUDA_OK(cudaEventElapsedTime(&milliseconds, start, end));
    auto &slot = times[static_cast<int>(program.instructions[index].opcode)];
    slot.first += milliseconds / 1e3;
    ++slot.second;
    events.give(start);
    events.give(end);
  }
  timed.clear();
  return absl::OkStatus();
}

} // namespace moe::rt::cuda
