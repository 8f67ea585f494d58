//===- HostPipelineDevice.cpp - pipelined steps on the CPU ----------------===//
#include "HostPipelineDevice.h"

#include <cstring>

namespace moe::rt::engine {

absl::StatusOr<uint8_t *>
HostPipelineDevice::allocate(uint64_t bytes, const std::string &what) {
  absl::StatusOr<AlignedBuffer> buffer = AlignedBuffer::allocate(bytes, what);
  if (!buffer.ok())
    return buffer.status();
  memory.push_back(std::move(*buffer));
  return memory.back().data();
}

absl::Status HostPipelineDevice::upload(uint8_t *to, const void *from,
                                        uint64_t bytes) {
  std::memcpy(to, from, bytes);
  return absl::OkStatus();
}

absl::Status HostPipelineDevice::download(void *to, const uint8_t *from,
                                          uint64_t bytes) {
  std::memcpy(to, from, bytes);
  return absl::OkStatus();
}

absl::Status HostPipelineDevice::run(size_t index) {
  if (!context)
    return absl::InternalError("pipeline: an instruction ran outside a step");
  return runInstruction(*context, index);
}

absl::Status
HostPipelineDevice::runOptimizer(size_t index, comm::Group *stages,
                                 const std::vector<bool> &foreign) {
  if (!context)
    return absl::InternalError("pipeline: an instruction ran outside a step");
  StepContext optimizer = *context;
  optimizer.stageGroup = stages;
  optimizer.foreignGradients = &foreign;
  return runInstruction(optimizer, index);
}

absl::Status HostPipelineDevice::zero(float *sum, int64_t n) {
  std::fill(sum, sum + n, 0.0f);
  return absl::OkStatus();
}

absl::Status HostPipelineDevice::accumulate(float *sum, const float *add,
                                            int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    sum[k] += add[k];
  return absl::OkStatus();
}

absl::Status HostPipelineDevice::average(float *into, const float *sum,
                                         int64_t n, float count) {
  for (int64_t k = 0; k < n; ++k)
    into[k] = sum[k] / count;
  return absl::OkStatus();
}

} // namespace moe::rt::engine
