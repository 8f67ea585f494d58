//===- DeviceStep.h - one instruction of a step on the GPU ------*- C++ -*-===//
//
// Private to the CUDA backend: what the dispatch of one instruction sees
// (the program, the device address of every buffer, the stream, the GEMM
// runner) and the helpers it shares. Scalars the CPU computes on the host
// (losses from their sums, norms) stay on the device (StepScalars.cu),
// summed over their groups in rank order with NCCL; in a pipelined step,
// whose runner checks on the host, they are read back and written again.
// The learning rate and step are known on the host ahead of time.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_DEVICESTEP_H
#define MOE_LIB_RUNTIME_CUDA_DEVICESTEP_H

#include "CollectiveWatch.h"
#include "CommStream.h"
#include "DeviceBuffer.h"
#include "PinnedStaging.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cuda/Gemm.h"
#include "moe/Runtime/Cuda/Nccl.h"
#include "moe/Runtime/Cuda/StepCheck.h"
#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <map>
#include <vector>

namespace moe::rt::cuda {

struct DeviceStep {
  const Program &program;
  /// The device address of every buffer, by index.
  const std::vector<void *> &pointers;
  cudaStream_t stream;
  GemmRunner &gemms;
  /// Every read of device memory goes through it (PinnedStaging.h), so a
  /// host wait behind a hung collective polls the watch.
  PinnedStaging &staging;
  int64_t step;
  /// A program over several ranks: per program group, its MPI group (for
  /// the few scalars summed on the host) and its NCCL communicator.
  const std::vector<comm::Group *> *groups = nullptr;
  const std::vector<NcclGroup *> *nccl = nullptr;
  /// Several ranks: the stream every NCCL call goes on.
  CommStream *comm = nullptr;
  /// The group of the pipeline stages, which a global norm sums over; none
  /// without stages.
  comm::Group *stageGroup = nullptr;
  /// A pipelined step's optimizer: the gradients other stages hold (no
  /// storage here), which the global norm leaves to them.
  const std::vector<bool> *foreignGradients = nullptr;
  /// Scalars the host wrote this step and nothing has written since
  /// (AdamW's learning rate, the clipping coefficient, the losses): each
  /// read of one would otherwise wait for the stream, once per AdamW. The
  /// backend owns it, clears it at each step and forgets a buffer that a
  /// hook writes (writeBuffer, fillBuffer); null: nothing is remembered.
  std::map<uint32_t, float> *hostScalars = nullptr;
  /// Several ranks: the deadlines of the NCCL collectives, which every
  /// host wait polls (synchronize).
  CollectiveWatch *watch = nullptr;
  /// The step's checks on the device (StepCheck.h): the first failure,
  /// which the host reads when the step ends. Null: the instructions check
  /// on the host, waiting for the stream.
  StepCheck *check = nullptr;
  /// Per instruction, the first of the multi-tensor AdamW batch it belongs
  /// to, or -1 (AdamwBatches.h); null: every AdamW runs alone.
  const std::vector<int64_t> *adamwBatchOf = nullptr;
  /// Chunks of every expert-parallel exchange (moe-run --expert-chunks).
  int64_t expertChunks = 1;

  /// The same step over other buffer addresses (an instruction's widened
  /// scratch).
  DeviceStep withPointers(const std::vector<void *> &other) const {
    return {program, other,      stream,           gemms,
            staging, step,       groups,           nccl,
            comm,    stageGroup, foreignGradients, hostScalars,
            watch,   check,      adamwBatchOf,     expertChunks};
  }

  /// Program group `index`'s MPI group and NCCL communicator; null on one
  /// rank, where every group is a group of one.
  comm::Group *mpiGroup(int64_t index) const {
    return groups ? (*groups)[index] : nullptr;
  }
  NcclGroup *ncclGroup(int64_t index) const {
    return nccl ? (*nccl)[index] : nullptr;
  }

  float *f32(uint32_t buffer) const {
    return static_cast<float *>(pointers[buffer]);
  }
  int32_t *i32(uint32_t buffer) const {
    return static_cast<int32_t *>(pointers[buffer]);
  }
  /// A BF16 buffer's bits (read as they are, not widened).
  uint16_t *bf16(uint32_t buffer) const {
    return static_cast<uint16_t *>(pointers[buffer]);
  }
  const Buffer &buffer(uint32_t index) const { return program.buffers[index]; }

  /// The value of a one-element f32 buffer: the one writeScalar left if no
  /// instruction has written the buffer since, else read back (waiting for
  /// the stream).
  absl::StatusOr<float> readScalar(uint32_t buffer) const;
  /// Sets a one-element f32 buffer from the host (no wait) and remembers
  /// the value for readScalar.
  absl::Status writeScalar(uint32_t buffer, float value) const;
  /// The value of an i32 step buffer: the step's own input is known on the
  /// host (no wait); another is read back.
  absl::StatusOr<int32_t> readStep(uint32_t buffer) const;
  /// Before instruction `index` runs: the values writeScalar left in its
  /// results are no longer known.
  void forgetResultsOf(size_t index) const;
  /// The contents of an i32 buffer (waits for the stream).
  absl::StatusOr<std::vector<int32_t>> readIds(uint32_t buffer) const;
  /// Any device array (waits for the stream, through the pinned staging).
  template <typename T>
  absl::Status read(const T *device, int64_t count, T *host) const;

  /// The BF16 values of `n` floats: into `copy` (allocated here), rounded
  /// to nearest even, for a BF16 kernel or GEMM that reads them.
  absl::StatusOr<const uint16_t *>
  castToBf16Scratch(const float *data, int64_t n,
                    DeviceBuffer<uint16_t> &copy) const;
  /// c = op(a) op(b) + beta c with BF16 inputs, into a c of spec.c's type.
  absl::Status gemm(const GemmSpec &spec, const uint16_t *a, const uint16_t *b,
                    float beta, void *c) const;
  /// c = op(a) op(b) on buffers of either float dtype (mixed precision): a
  /// BF16 input is read as it is, an fp32 one rounded to BF16 first; an
  /// fp32 c takes the fp32 sums, a BF16 one those sums rounded once to
  /// nearest even (as the CPU's GEMMs round their BF16 results).
  absl::Status gemmOnBuffers(const GemmSpec &spec, uint32_t a, uint32_t b,
                             uint32_t c) const;
};

/// Waits until `stream` has drained: cudaStreamSynchronize, or with a
/// watch a poll that ends with an error (every communicator aborted) when a
/// collective fails or passes its deadline.
absl::Status synchronize(cudaStream_t stream, CollectiveWatch *watch);

/// Runs instruction `index` of the step.
absl::Status runDeviceInstruction(const DeviceStep &step, size_t index);

/// Experts and ExpertsGrad (one rank): tokens grouped by expert, one GEMM
/// per expert and projection.
absl::Status runExpertsForward(const DeviceStep &step, size_t index);
absl::Status runExpertsBackward(const DeviceStep &step, size_t index);

/// Instruction `index` has a kernel for BF16 storage and its buffers have
/// the dtypes that kernel takes: it runs on the BF16 buffers as they are,
/// not on widened fp32 scratch (DeviceBf16.cpp).
bool runsOnBf16Storage(const DeviceStep &step, size_t index);
/// Attention or AttentionGrad on BF16 storage: the tensor-core kernels.
absl::Status runTensorCoreAttention(const DeviceStep &step, size_t index);

/// Operand `buffer` of instruction `index` is BF16 and its kernel reads it
/// as BF16 (not widened into fp32 scratch): the expert weights of Experts
/// and ExpertsGrad without FP8 GEMMs (DeviceExperts.cpp).
bool readsBf16Operand(const DeviceStep &step, size_t index, uint32_t buffer);

/// Rows of an activation [..., X]: the product of its leading dimensions.
int64_t rowsOf(const Buffer &buffer);

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_DEVICESTEP_H
