//===- HostPipelineDevice.h - pipelined steps on the CPU --------*- C++ -*-===//
//
// Private to the executor: the PipelineStep::Device of the CPU backend.
// Memory is host memory (AlignedBuffer), copies are memcpy, instructions are
// the CPU kernels (runInstruction) with the step's context, and gradients
// add up in fp32 element by element.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_HOSTPIPELINEDEVICE_H
#define MOE_LIB_RUNTIME_ENGINE_HOSTPIPELINEDEVICE_H

#include "AlignedBuffer.h"
#include "Dispatch.h"

#include "moe/Runtime/Engine/PipelineStep.h"

#include <vector>

namespace moe::rt::engine {

class HostPipelineDevice : public PipelineStep::Device {
public:
  /// The context of the running step; instructions run only while one is
  /// set.
  void setContext(const StepContext *running) { context = running; }

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

private:
  std::vector<AlignedBuffer> memory;
  const StepContext *context = nullptr;
};

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_HOSTPIPELINEDEVICE_H
