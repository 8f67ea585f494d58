//===- DeviceExecutor.cpp - a training step on a GPU ----------------------===//
#include "moe/Runtime/Cuda/DeviceExecutor.h"

#include "moe/Runtime/Artifact/Capabilities.h"

#include "DeviceBuffer.h"
#include "DeviceStep.h"

#include "absl/strings/str_cat.h"

#include <cmath>

namespace moe::rt::cuda {

struct DeviceExecutor::State {
  cudaStream_t stream = nullptr;
  std::unique_ptr<GemmRunner> gemms;
  /// Several ranks: the job's MPI group and NCCL communicator, and per
  /// program group its MPI group (the host executor's) and NCCL
  /// communicator. The groups' communicators go before the job's.
  std::unique_ptr<comm::Group> everyone;
  std::unique_ptr<NcclWorld> nccl;
  std::vector<std::unique_ptr<NcclGroup>> ncclOwned;
  std::vector<NcclGroup *> ncclGroups;
  std::vector<comm::Group *> mpiGroups;
  std::unique_ptr<CommStream> comm;
  /// One allocation per persistent buffer (parameters, optimizer state,
  /// inputs) and one arena for the temporaries, at their planned offsets.
  std::vector<void *> pointers;
  std::vector<void *> owned;
  void *arena = nullptr;
  size_t lossReadyAt = 0, gradNormReadyAt = 0;

  ~State() {
    if (stream)
      cudaStreamSynchronize(stream);
    for (void *p : owned)
      cudaFree(p);
    if (arena)
      cudaFree(arena);
    comm.reset();
    ncclOwned.clear();
    nccl.reset();
    gemms.reset();
    if (stream)
      cudaStreamDestroy(stream);
  }
};

namespace {

/// The last instruction writing `buffer` (0 when none does).
size_t lastWriterOf(const Program &program, uint32_t buffer) {
  std::vector<int64_t> writers = program.lastWriters();
  return writers[buffer] < 0 ? 0 : static_cast<size_t>(writers[buffer]);
}

absl::Status nonFinite(int64_t step, const char *what, float value) {
  return absl::InvalidArgumentError(
      atStep(step, absl::StrCat(what, " is not finite (", value, ")")));
}

} // namespace

DeviceExecutor::DeviceExecutor(const Program &program, const DeviceInfo &device)
    : program(program), info(device), state(std::make_unique<State>()) {}

DeviceExecutor::~DeviceExecutor() = default;

absl::StatusOr<std::unique_ptr<DeviceExecutor>>
DeviceExecutor::create(const Executor &host, const DeviceInfo &device,
                       comm::World *world) {
  const Program &program = host.program();
  // The backend's capability record (moe/Runtime/Capabilities.h), as at
  // load time; FP8 GEMMs on a GPU older than sm_89 are refused by the
  // experts' first step.
  MOE_CUDA_TRY(checkCapabilities(program, "the program", "cuda"));
  std::unique_ptr<DeviceExecutor> executor(new DeviceExecutor(program, device));
  State &state = *executor->state;
  MOE_CUDA_OK(cudaSetDevice(device.ordinal));
  MOE_CUDA_OK(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking));
  if (program.numRanks() > 1)
    MOE_CUDA_TRY(executor->connect(host, world));
  absl::StatusOr<std::unique_ptr<GemmRunner>> gemms =
      GemmRunner::create(device.computeCapability);
  if (!gemms.ok())
    return gemms.status();
  state.gemms = std::move(*gemms);
  state.pointers.assign(program.buffers.size(), nullptr);
  MOE_CUDA_OK(cudaMalloc(&state.arena, std::max<uint64_t>(program.arenaBytes, 1)));
  executor->allocated += program.arenaBytes;
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (buffer.kind == BufferKind::Temporary) {
      state.pointers[b] = static_cast<char *>(state.arena) + buffer.offset;
      continue;
    }
    void *storage = nullptr;
    MOE_CUDA_OK(cudaMalloc(&storage, std::max<uint64_t>(buffer.sizeInBytes(), 1)));
    state.owned.push_back(storage);
    state.pointers[b] = storage;
    executor->allocated += buffer.sizeInBytes();
  }
  state.lossReadyAt = lastWriterOf(program, program.loss);
  state.gradNormReadyAt = lastWriterOf(program, program.gradNorm);
  MOE_CUDA_TRY(executor->upload(host));
  return executor;
}

absl::Status DeviceExecutor::connect(const Executor &host,
                                     comm::World *world) {
  if (!world || world->size() != program.numRanks())
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA backend needs the job's ", program.numRanks(),
        " ranks for this program"));
  State &s = *state;
  absl::StatusOr<std::unique_ptr<comm::Group>> everyone =
      host.createGroup(program.meshAxes);
  if (!everyone.ok())
    return everyone.status();
  s.everyone = std::move(*everyone);
  absl::StatusOr<std::unique_ptr<NcclWorld>> nccl =
      NcclWorld::create(*s.everyone, info.ordinal);
  if (!nccl.ok())
    return nccl.status();
  s.nccl = std::move(*nccl);
  absl::StatusOr<std::unique_ptr<CommStream>> comm = CommStream::create(program);
  if (!comm.ok())
    return comm.status();
  s.comm = std::move(*comm);
  // Every rank splits every group, in program order.
  for (size_t g = 0; g < program.groups.size(); ++g) {
    comm::Group &group = host.group(g);
    absl::StatusOr<std::unique_ptr<NcclGroup>> split = s.nccl->split(group);
    if (!split.ok())
      return split.status();
    s.mpiGroups.push_back(&group);
    s.ncclGroups.push_back(split->get());
    s.ncclOwned.push_back(std::move(*split));
  }
  return absl::OkStatus();
}

absl::Status DeviceExecutor::upload(const Executor &host) {
  // On the step's stream: it does not synchronise with the legacy default
  // stream (cudaStreamNonBlocking), and a cudaMemcpy from pageable memory
  // may return before its data has reached the device. Work left in flight
  // by a failed step finishes first.
  MOE_CUDA_OK(cudaStreamSynchronize(state->stream));
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (buffer.kind != BufferKind::Parameter &&
        buffer.kind != BufferKind::OptimizerState)
      continue;
    MOE_CUDA_OK(cudaMemcpyAsync(state->pointers[b], host.data(b),
                                buffer.sizeInBytes(), cudaMemcpyHostToDevice,
                                state->stream));
  }
  MOE_CUDA_OK(cudaStreamSynchronize(state->stream));
  return absl::OkStatus();
}

absl::Status DeviceExecutor::download(Executor &host) const {
  MOE_CUDA_OK(cudaStreamSynchronize(state->stream));
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (buffer.kind != BufferKind::Parameter &&
        buffer.kind != BufferKind::OptimizerState)
      continue;
    MOE_CUDA_OK(cudaMemcpy(host.data(b), state->pointers[b],
                           buffer.sizeInBytes(), cudaMemcpyDeviceToHost));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> DeviceExecutor::runStep(const int32_t *tokens,
                                                   const int32_t *targets,
                                                   int64_t step) {
  MOE_CUDA_TRY(checkStepInputs(tokens, targets, step));
  cudaStream_t stream = state->stream;
  uint64_t inputBytes = program.buffers[program.tokens].sizeInBytes();
  int32_t at = static_cast<int32_t>(step);
  MOE_CUDA_OK(cudaMemcpyAsync(state->pointers[program.tokens], tokens,
                              inputBytes, cudaMemcpyHostToDevice, stream));
  MOE_CUDA_OK(cudaMemcpyAsync(state->pointers[program.targets], targets,
                              inputBytes, cudaMemcpyHostToDevice, stream));
  MOE_CUDA_OK(cudaMemcpyAsync(state->pointers[program.step], &at,
                              sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  DeviceStep context{program, state->pointers, stream, *state->gemms, step};
  if (!state->ncclGroups.empty()) {
    context.groups = &state->mpiGroups;
    context.nccl = &state->ncclGroups;
    context.comm = state->comm.get();
  }
  // Nothing enqueued may still read the caller's tokens and targets (or
  // run on, on either stream) once the step has returned.
  auto drain = [&] {
    if (state->comm) {
      state->comm->finish(stream).IgnoreError();
      cudaStreamSynchronize(state->comm->stream());
    }
    cudaStreamSynchronize(stream);
  };
  auto failed = [&](const absl::Status &status) {
    drain();
    return atStep(step, status);
  };
  for (size_t index = 0; index < program.instructions.size(); ++index) {
    if (state->comm)
      if (absl::Status status = state->comm->before(stream, index);
          !status.ok())
        return failed(status);
    if (absl::Status status = runDeviceInstruction(context, index);
        !status.ok())
      return failed(status);
    // As on the CPU: a diverged step stops before the optimizer writes
    // non-finite values into the weights.
    for (auto [readyAt, buffer, what] :
         {std::make_tuple(state->lossReadyAt, program.loss, "loss"),
          std::make_tuple(state->gradNormReadyAt, program.gradNorm,
                          "gradient norm")}) {
      if (index != readyAt)
        continue;
      absl::StatusOr<float> value = context.readScalar(buffer);
      if (!value.ok())
        return failed(value.status());
      if (!std::isfinite(*value)) {
        // Deferred reductions may still be in flight.
        drain();
        return nonFinite(step, what, *value);
      }
    }
  }
  if (state->comm)
    if (absl::Status status = state->comm->finish(stream); !status.ok())
      return failed(status);
  StepResult result;
  for (auto [buffer, into] : {std::make_pair(program.loss, &result.loss),
                              std::make_pair(program.gradNorm, &result.gradNorm),
                              std::make_pair(program.lr, &result.lr)}) {
    absl::StatusOr<float> value = context.readScalar(buffer);
    if (!value.ok())
      return failed(value.status());
    *into = *value;
  }
  // Errors inside kernels surface at a synchronisation; this is the last.
  if (absl::Status status =
          cudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      !status.ok())
    return failed(status);
  return result;
}

} // namespace moe::rt::cuda
