//===- DeviceExecutor.h - a training step on a GPU --------------*- C++ -*-===//
//
// Runs a verified artifact's step with the CUDA kernels and cuBLASLt GEMMs
// (BF16 inputs, fp32 accumulation; everything else fp32 as on the CPU). The
// host Executor keeps the program, initialises the weights and saves them;
// this one holds their device copies, which upload() and download() move.
//
// Over several ranks (one GPU each), the program's groups get NCCL
// communicators: collectives run on the GPU, and the losses' and norms'
// sums over ranks, a few scalars, travel over MPI as on the CPU, as does the
// expert exchange's agreement (its rows go over NCCL). Pipelines are
// refused at creation, saying so.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_DEVICEEXECUTOR_H
#define MOE_RUNTIME_CUDA_DEVICEEXECUTOR_H

#include "moe/Runtime/Cuda/Device.h"
#include "moe/Runtime/Engine/Executor.h"

#include <memory>

namespace moe::rt::cuda {

class DeviceExecutor {
public:
  /// Allocates the device copy of `host`'s program on `device`, or fails
  /// naming what it cannot run. A program over several ranks needs the
  /// job's `world` (that of `host`); creation is then a collective call.
  static absl::StatusOr<std::unique_ptr<DeviceExecutor>>
  create(const Executor &host, const DeviceInfo &device,
         comm::World *world = nullptr);
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor &) = delete;
  DeviceExecutor &operator=(const DeviceExecutor &) = delete;

  /// Copies the parameters and optimizer state of `host` to the device.
  absl::Status upload(const Executor &host);
  /// Copies them back (before saving, or to compare).
  absl::Status download(Executor &host) const;

  /// As Executor::runStep, on the device. Errors name the step and, for bad
  /// ids, the instruction and the position; a non-finite loss or gradient
  /// norm stops the step before the optimizer.
  absl::StatusOr<StepResult> runStep(const int32_t *tokens,
                                     const int32_t *targets, int64_t step);

  const DeviceInfo &device() const { return info; }
  /// Device memory held between steps: persistent buffers and the arena.
  uint64_t allocatedBytes() const { return allocated; }

private:
  struct State;
  DeviceExecutor(const Program &program, const DeviceInfo &device);
  /// Several ranks: the NCCL communicators of the program's groups.
  absl::Status connect(const Executor &host, comm::World *world);

  const Program &program;
  DeviceInfo info;
  std::unique_ptr<State> state;
  uint64_t allocated = 0;
};

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_DEVICEEXECUTOR_H
