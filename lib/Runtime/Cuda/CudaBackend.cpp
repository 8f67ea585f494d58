//===- CudaBackend.cpp - training steps on a GPU --------------------------===//
#include "moe/Runtime/Cuda/CudaBackend.h"

#include "AdamwBatches.h"
#include "DeviceBuffer.h"
#include "DevicePipeline.h"
#include "DeviceStep.h"
#include "ExpertMatmul.h"
#include "PinnedStaging.h"
#include "StepTimeline.h"

#include "moe/Runtime/Artifact/Capabilities.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/Cuda/Device.h"
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/Engine/HostWeights.h"
#include "moe/Runtime/Engine/PipelineStep.h"
#include "moe/Runtime/Engine/ProgramGroups.h"
#include "moe/Runtime/IO/Metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cmath>
#include <cstdlib>
#include <optional>

namespace moe::rt::cuda {

namespace {

/// The last instruction writing `buffer` (0 when none does).
size_t lastWriterOf(const Program &program, uint32_t buffer) {
  std::vector<int64_t> writers = program.lastWriters();
  return writers[buffer] < 0 ? 0 : static_cast<size_t>(writers[buffer]);
}

/// One GPU per process: the launcher's local rank picks it (Open MPI,
/// Slurm), else the world rank.
absl::StatusOr<DeviceInfo> deviceOfThisProcess(const comm::World *world) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = listDevices();
  if (!devices.ok())
    return absl::FailedPreconditionError(
        absl::StrCat("--device cuda: ", devices.status().message()));
  int64_t local = world ? world->rank() : 0;
  for (const char *variable :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *value = std::getenv(variable)) {
      local = std::atoll(value);
      break;
    }
  return (*devices)[static_cast<size_t>(local) % devices->size()];
}

class CudaBackend final : public Backend {
public:
  CudaBackend(std::shared_ptr<const Program> program, DeviceInfo device,
              int64_t rank, bool profile, io::Trace *trace,
              int64_t expertChunks)
      : prog(std::move(program)), info(std::move(device)),
        held(engine::heldBuffers(*prog, engine::pipelineRankOf(*prog, rank))),
        host(prog, rank, &held), expertChunks(expertChunks),
        profiling(profile) {
    if (trace)
      timeline = std::make_unique<StepTimeline>(*trace);
  }
  ~CudaBackend() override;

  /// Allocates the buffers on the device and connects the ranks.
  absl::Status setUp(comm::World *world);

  std::string_view name() const override { return "cuda"; }
  const Program &program() const override { return *prog; }
  int64_t rank() const override { return host.rank(); }
  BatchBlock batchBlock() const override {
    return {host.placementOf().blockIndex(prog->batchAxes),
            prog->partsOf(prog->batchAxes)};
  }
  int64_t tokensPerStep() const override {
    return prog->buffers[prog->tokens].numElements() * microbatches();
  }
  int64_t microbatches() const override {
    return prog->pipeline.enabled() ? prog->pipeline.microbatches : 1;
  }
  uint64_t totalParameterBytes() const override { return parameterBytes; }
  uint64_t optimizerStateBytes() const override { return stateBytes; }
  uint64_t arenaBytes() const override {
    return pipelineStep ? prog->arenaBytes * pipelineStep->slotsAllocated()
                        : prog->arenaBytes;
  }
  std::string placementLine() const override {
    return absl::StrFormat("device: %s %d (sm_%d, %.1f GiB), %s B on it",
                           info.name, info.ordinal, info.computeCapability,
                           info.memoryBytes / 1073741824.0,
                           io::formatSiValue(allocated));
  }

  std::optional<DeviceMemory> deviceMemory() const override {
    // The stream-ordered pool's high-water mark: every instruction's
    // scratch (DeviceBuffer.h) comes from it, nothing else does.
    cudaMemPool_t pool = nullptr;
    uint64_t peak = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, info.ordinal) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &peak) !=
            cudaSuccess)
      return std::nullopt;
    return DeviceMemory{allocated + kGemmWorkspaceBytes, peak};
  }

  absl::Status initialize(uint64_t seed) override {
    engine::initializeWeights(host, seed);
    return pushWeights();
  }
  WeightStore &weights() override { return host; }
  absl::Status pullWeights() override;
  absl::Status pushWeights() override;

  absl::StatusOr<std::unique_ptr<comm::Group>>
  createGroup(const AxisList &axes) const override {
    return jobWorld->group(comm::Mesh{prog->meshAxes, prog->meshShape}, axes);
  }
  absl::Status sumOverStages(absl::Span<double> values) override {
    if (!stageGroup)
      return absl::OkStatus();
    return comm::sumOverGroup(*stageGroup, values, {});
  }
  /// Document masking is refused at load (capabilities): `positions`
  /// only passes the inputs' check.
  absl::StatusOr<StepResult> runStep(const int32_t *tokens,
                                     const int32_t *targets, int64_t step,
                                     const StepHooks &hooks,
                                     const int32_t *positions) override;

  absl::Status readBuffer(uint32_t buffer, void *host) const override;
  absl::Status writeBuffer(uint32_t buffer, const void *host) override;
  absl::Status fillBuffer(uint32_t buffer, uint32_t pattern) override;
  bool tracesSteps() const override { return true; }
  const OpcodeTimes *instructionTimes() const override {
    return profiling ? &opcodeTimes : nullptr;
  }

private:
  /// --profile: adds the step's instruction times, from the events around
  /// each instruction, to opcodeTimes (after the step's last
  /// synchronisation).
  absl::Status addInstructionTimes();
  /// --trace: after the step's last wait, writes the step's spans to the
  /// trace, or forgets them (a failed step).
  absl::Status writeTimeline();
  void forgetTimeline();

  /// Copies buffer `buffer`'s bytes from `from` to `to` (one of them its
  /// device storage) on the step's stream, after the work already on it,
  /// and waits for the copy.
  absl::Status copyBuffer(uint32_t buffer, void *to, const void *from,
                          cudaMemcpyKind kind) const;

  /// Several ranks, or a mesh of one: the NCCL communicators of the
  /// program's groups.
  absl::Status connect();
  /// A pipelined program: the group over the stages and the runner.
  absl::Status connectStages();
  /// A pipelined step: the shared runner over DevicePipeline.
  absl::StatusOr<StepResult> runPipelined(const int32_t *tokens,
                                          const int32_t *targets, int64_t step,
                                          const StepHooks &hooks,
                                          DeviceStep &context);
  /// Mixed precision: each BF16 working copy = its fp32 master rounded to
  /// nearest even, as AdamW leaves it after every step (the copies are
  /// derived, never loaded or saved).
  absl::Status refreshWorkingCopies();

  std::shared_ptr<const Program> prog;
  DeviceInfo info;
  /// The buffers this rank holds: all but other pipeline stages' weights.
  std::vector<bool> held;
  /// The host staging of the weights it holds: no inputs, temporaries or
  /// arena.
  engine::HostWeights host;
  /// The job: the world given, or a world of one.
  std::unique_ptr<comm::World> localWorld;
  comm::World *jobWorld = nullptr;
  cudaStream_t stream = nullptr;
  std::unique_ptr<GemmRunner> gemms;
  /// Several ranks: the job's MPI group and NCCL communicator, and per
  /// program group its MPI group and NCCL communicator. The groups'
  /// communicators go before the job's.
  std::vector<std::unique_ptr<comm::Group>> groups;
  std::unique_ptr<comm::Group> everyone;
  std::unique_ptr<NcclWorld> nccl;
  std::vector<std::unique_ptr<NcclGroup>> ncclOwned;
  std::vector<NcclGroup *> ncclGroups;
  std::vector<comm::Group *> mpiGroups;
  std::unique_ptr<CommStream> comm;
  /// A pipelined program: the "pp" group (several stages), the runner and
  /// its device memory; temporaries live in the runner's slots.
  std::unique_ptr<comm::Group> stageGroup;
  std::unique_ptr<engine::PipelineStep> pipelineStep;
  std::unique_ptr<DevicePipeline> pipelineDevice;
  /// The runner's addresses (uint8_t *), mirrored into `pointers`.
  std::vector<uint8_t *> runnerPointers;
  /// One allocation per persistent buffer (parameters, optimizer state,
  /// inputs) and one arena for the temporaries, at their planned offsets.
  std::vector<void *> pointers;
  std::vector<void *> owned;
  void *arena = nullptr;
  size_t lossReadyAt = 0, gradNormReadyAt = 0;
  /// --expert-chunks (DeviceStep::expertChunks).
  int64_t expertChunks = 1;
  uint64_t allocated = 0, parameterBytes = 0, stateBytes = 0;
  /// --profile: two events per instruction (before and after it, on the
  /// compute stream) and the sums so far.
  bool profiling = false;
  /// --trace: the spans of the running step, on both streams.
  std::unique_ptr<StepTimeline> timeline;
  std::vector<cudaEvent_t> profileEvents;
  OpcodeTimes opcodeTimes = OpcodeTimes(kNumOpcodes);
  /// DeviceStep::hostScalars of the step running.
  std::map<uint32_t, float> hostScalars;
  /// The step's checks on the device (DeviceStep::check), zeroed as each
  /// step begins; not for pipelined steps, whose runner checks on the host.
  StepCheck *deviceCheck = nullptr;
  /// DeviceStep::adamwBatchOf of a step without pipeline stages.
  std::vector<int64_t> adamwBatchOf;
  /// DeviceStep::staging: every read of a step, so a wait behind a hung
  /// collective polls the watch. Destroyed after the streams.
  PinnedStaging staging;
};

CudaBackend::~CudaBackend() {
  if (stream)
    cudaStreamSynchronize(stream);
  pipelineStep.reset();
  pipelineDevice.reset();
  for (void *p : owned)
    cudaFree(p);
  if (arena)
    cudaFree(arena);
  if (deviceCheck)
    cudaFree(deviceCheck);
  comm.reset();
  ncclOwned.clear();
  nccl.reset();
  gemms.reset();
  for (cudaEvent_t event : profileEvents)
    cudaEventDestroy(event);
  if (stream)
    cudaStreamDestroy(stream);
}

absl::Status CudaBackend::setUp(comm::World *world) {
  const Program &program = *prog;
  MOE_CUDA_OK(cudaSetDevice(info.ordinal));
  // Instructions take their scratch from the stream-ordered allocator
  // (DeviceBuffer.h). Its default release threshold of 0 hands every freed
  // block back to the driver at each synchronisation, so the next step
  // maps it again; keeping it makes the second step's allocations free.
  cudaMemPool_t pool = nullptr;
  MOE_CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, info.ordinal));
  uint64_t keepEverything = UINT64_MAX;
  MOE_CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                      &keepEverything));
  MOE_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  absl::StatusOr<comm::World *> job = engine::jobWorldOf(world, localWorld);
  if (!job.ok())
    return job.status();
  jobWorld = *job;
  // A mesh of one rank (moec --mesh ep=1, ...) connects too: its groups of
  // one get NCCL communicators and its expert-parallel layers exchange
  // their rows with themselves on the communication stream, which is how
  // one GPU runs that code (test/gpu/run.sh).
  if (program.numRanks() > 1 || !program.groups.empty())
    MOE_CUDA_TRY(connect());
  if (program.pipeline.enabled())
    MOE_CUDA_TRY(connectStages());
  if (profiling) {
    profileEvents.assign(2 * program.instructions.size(), nullptr);
    for (cudaEvent_t &event : profileEvents)
      MOE_CUDA_OK(cudaEventCreate(&event));
  }
  absl::StatusOr<std::unique_ptr<GemmRunner>> created =
      GemmRunner::create(info.computeCapability);
  if (!created.ok())
    return created.status();
  gemms = std::move(*created);
  pointers.assign(program.buffers.size(), nullptr);
  // A pipelined step runs in its microbatch slots' arenas instead.
  if (!pipelineStep) {
    MOE_CUDA_OK(cudaMalloc(&arena, std::max<uint64_t>(program.arenaBytes, 1)));
    allocated += program.arenaBytes;
    MOE_CUDA_OK(cudaMalloc(&deviceCheck, sizeof(StepCheck)));
  }
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (buffer.kind == BufferKind::Temporary) {
      if (arena)
        pointers[b] = static_cast<char *>(arena) + buffer.offset;
      continue;
    }
    // Another pipeline stage's weights: no storage here.
    if (!held[b])
      continue;
    void *storage = nullptr;
    MOE_CUDA_OK(
        cudaMalloc(&storage, std::max<uint64_t>(buffer.sizeInBytes(), 1)));
    owned.push_back(storage);
    pointers[b] = storage;
    allocated += buffer.sizeInBytes();
    if (buffer.kind == BufferKind::Parameter)
      parameterBytes += buffer.sizeInBytes();
    else if (buffer.kind == BufferKind::OptimizerState)
      stateBytes += buffer.sizeInBytes();
  }
  adamwBatchOf = adamwBatches(program);
  lossReadyAt = lastWriterOf(program, program.loss);
  gradNormReadyAt = lastWriterOf(program, program.gradNorm);
  if (pipelineStep) {
    runnerPointers.assign(pointers.size(), nullptr);
    for (size_t b = 0; b < pointers.size(); ++b)
      runnerPointers[b] = static_cast<uint8_t *>(pointers[b]);
    // Every slot the schedule holds at once, and the gradient sums, now:
    // a step does not run out of memory halfway.
    MOE_CUDA_TRY(pipelineStep->reserve(*pipelineDevice, runnerPointers));
    allocated += pipelineDevice->bytesAllocated();
  }
  return pushWeights();
}

absl::Status CudaBackend::connectStages() {
  const Program &program = *prog;
  absl::StatusOr<std::unique_ptr<comm::Group>> group =
      engine::createStageGroup(program, jobWorld);
  if (!group.ok())
    return group.status();
  stageGroup = std::move(*group);
  int32_t stageRank = engine::pipelineRankOf(program, rank());
  absl::StatusOr<std::unique_ptr<engine::PipelineStep>> runner =
      engine::PipelineStep::create(program, stageRank, stageGroup.get());
  if (!runner.ok())
    return runner.status();
  pipelineStep = std::move(*runner);
  pipelineDevice =
      std::make_unique<DevicePipeline>(pointers, profiling, timeline.get());
  return absl::OkStatus();
}

absl::Status CudaBackend::connect() {
  const Program &program = *prog;
  absl::StatusOr<std::vector<std::unique_ptr<comm::Group>>> created =
      engine::createProgramGroups(program, *jobWorld);
  if (!created.ok())
    return created.status();
  groups = std::move(*created);
  absl::StatusOr<std::unique_ptr<comm::Group>> all =
      createGroup(program.meshAxes);
  if (!all.ok())
    return all.status();
  everyone = std::move(*all);
  absl::StatusOr<std::unique_ptr<NcclWorld>> world =
      NcclWorld::create(*everyone, info.ordinal);
  if (!world.ok())
    return world.status();
  nccl = std::move(*world);
  absl::StatusOr<std::unique_ptr<CommStream>> stream =
      CommStream::create(program);
  if (!stream.ok())
    return stream.status();
  comm = std::move(*stream);
  // Every rank splits every group, in program order, and a second time
  // those whose gradient reductions run on the reductions lane.
  std::vector<bool> reducedLater = comm->groupsReducedLater(program);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::unique_ptr<comm::Group> &group = groups[g];
    absl::StatusOr<std::unique_ptr<NcclGroup>> split =
        nccl->split(*group, reducedLater[g] && group->size() > 1);
    if (!split.ok())
      return split.status();
    mpiGroups.push_back(group.get());
    ncclGroups.push_back(split->get());
    ncclOwned.push_back(std::move(*split));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::pushWeights() {
  // On the step's stream: it does not synchronise with the legacy default
  // stream (cudaStreamNonBlocking), and a cudaMemcpy from pageable memory
  // may return before its data has reached the device. Work left in flight
  // by a failed step finishes first.
  MOE_CUDA_OK(cudaStreamSynchronize(stream));
  for (const std::vector<uint32_t> *set :
       {&host.parameters(), &host.optimizerStates()})
    for (uint32_t b : *set)
      MOE_CUDA_OK(cudaMemcpyAsync(pointers[b], host.data(b),
                                  prog->buffers[b].sizeInBytes(),
                                  cudaMemcpyHostToDevice, stream));
  MOE_CUDA_TRY(refreshWorkingCopies());
  MOE_CUDA_OK(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::refreshWorkingCopies() {
  for (uint32_t b = 0; b < prog->buffers.size(); ++b) {
    const Buffer &copy = prog->buffers[b];
    // Another pipeline stage's copies are that stage's to derive.
    if (copy.kind != BufferKind::WorkingCopy || !held[b])
      continue;
    // The verifier's invariants, which this cast relies on.
    const Buffer *master = copy.master < prog->buffers.size()
                               ? &prog->buffers[copy.master]
                               : nullptr;
    if (!master || master->kind != BufferKind::Parameter ||
        master->dtype != DType::F32 || copy.dtype != DType::BF16 ||
        master->numElements() != copy.numElements())
      return absl::InternalError(absl::StrCat(
          "working copy '", copy.name, "' is not the bf16 copy of an f32 "
          "parameter of its size"));
    MOE_CUDA_TRY(castToBf16(static_cast<const float *>(pointers[copy.master]),
                            static_cast<uint16_t *>(pointers[b]),
                            copy.numElements(), stream));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::pullWeights() {
  MOE_CUDA_OK(cudaStreamSynchronize(stream));
  for (const std::vector<uint32_t> *set :
       {&host.parameters(), &host.optimizerStates()})
    for (uint32_t b : *set)
      MOE_CUDA_OK(cudaMemcpy(host.data(b), pointers[b],
                             prog->buffers[b].sizeInBytes(),
                             cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaBackend::copyBuffer(uint32_t buffer, void *to,
                                     const void *from,
                                     cudaMemcpyKind kind) const {
  MOE_CUDA_TRY(checkBufferIndex(name(), *prog, buffer));
  uint64_t bytes = prog->buffers[buffer].sizeInBytes();
  if (bytes == 0)
    return absl::OkStatus();
  MOE_CUDA_OK(cudaMemcpyAsync(to, from, bytes, kind, stream));
  MOE_CUDA_OK(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::readBuffer(uint32_t buffer, void *host) const {
  return copyBuffer(buffer, host,
                    buffer < pointers.size() ? pointers[buffer] : nullptr,
                    cudaMemcpyDeviceToHost);
}

absl::Status CudaBackend::writeBuffer(uint32_t buffer, const void *host) {
  hostScalars.erase(buffer);
  return copyBuffer(buffer,
                    buffer < pointers.size() ? pointers[buffer] : nullptr,
                    host, cudaMemcpyHostToDevice);
}

absl::Status CudaBackend::fillBuffer(uint32_t buffer, uint32_t pattern) {
  MOE_CUDA_TRY(checkBufferIndex(name(), *prog, buffer));
  // A test's and tool's hook, not the step's: a host copy of the pattern
  // is simpler than a kernel and fast enough.
  std::vector<uint8_t> filled(prog->buffers[buffer].sizeInBytes());
  fillPattern(filled.data(), filled.size(), pattern);
  return writeBuffer(buffer, filled.data());
}

absl::StatusOr<StepResult> CudaBackend::runStep(const int32_t *tokens,
                                                const int32_t *targets,
                                                int64_t step,
                                                const StepHooks &hooks,
                                                const int32_t *positions) {
  const Program &program = *prog;
  MOE_CUDA_TRY(checkStepInputs(program, tokens, targets, positions, step));
  // The stream is idle (the last step ended with a wait): the timeline's
  // origin is now.
  if (timeline)
    MOE_CUDA_TRY(timeline->begin(stream));
  uint64_t inputBytes = program.buffers[program.tokens].sizeInBytes();
  int32_t at = static_cast<int32_t>(step);
  MOE_CUDA_OK(cudaMemcpyAsync(pointers[program.tokens], tokens, inputBytes,
                              cudaMemcpyHostToDevice, stream));
  MOE_CUDA_OK(cudaMemcpyAsync(pointers[program.targets], targets, inputBytes,
                              cudaMemcpyHostToDevice, stream));
  MOE_CUDA_OK(cudaMemcpyAsync(pointers[program.step], &at, sizeof(int32_t),
                              cudaMemcpyHostToDevice, stream));
  DeviceStep context{program, pointers, stream, *gemms, staging, step};
  context.expertChunks = expertChunks;
  hostScalars.clear();
  context.hostScalars = &hostScalars;
  CollectiveWatch *watch = nullptr;
  if (!ncclGroups.empty()) {
    context.groups = &mpiGroups;
    context.nccl = &ncclGroups;
    context.comm = comm.get();
    watch = context.watch = &nccl->watch();
  }
  // Nothing enqueued may still read the caller's tokens and targets (or
  // run on, on either stream) once the step has returned.
  auto drain = [&] {
    if (comm) {
      comm->finish(stream).IgnoreError();
      for (CommStream::Lane lane :
           {CommStream::Lane::Main, CommStream::Lane::Reductions})
        synchronize(comm->stream(lane), watch).IgnoreError();
    }
    synchronize(stream, watch).IgnoreError();
  };
  auto failed = [&](const absl::Status &status) {
    drain();
    forgetTimeline();
    return atStep(step, status);
  };
  if (pipelineStep) {
    // A scalar buffer holds each microbatch's value in turn, in its own
    // slot: none is remembered, every read comes from the running slot.
    context.hostScalars = nullptr;
    absl::StatusOr<StepResult> result =
        runPipelined(tokens, targets, step, hooks, context);
    if (!result.ok())
      drain();
    return result;
  }
  MOE_CUDA_OK(cudaMemsetAsync(deviceCheck, 0, sizeof(StepCheck), stream));
  context.check = deviceCheck;
  // A step watched instruction by instruction (the conformance suite,
  // --dump-step) sees each AdamW's own effect: batching would run later
  // AdamWs early, before the hooks of the instructions between them.
  context.adamwBatchOf =
      hooks.beforeInstruction || hooks.afterInstruction ? nullptr
                                                        : &adamwBatchOf;
  // --profile: event `which` (two per instruction) on the compute stream.
  auto mark = [&](size_t which) {
    return profiling ? cudaStatus(cudaEventRecord(profileEvents[which], stream),
                                  "cudaEventRecord")
                     : absl::OkStatus();
  };
  for (size_t index = 0; index < program.instructions.size(); ++index) {
    if (comm)
      if (absl::Status status = comm->before(stream, index); !status.ok())
        return failed(status);
    const Instruction &instruction = program.instructions[index];
    if (hooks.beforeInstruction)
      hooks.beforeInstruction(index, instruction);
    if (absl::Status status = mark(2 * index); !status.ok())
      return failed(status);
    absl::StatusOr<std::optional<size_t>> span =
        startInstructionSpan(timeline.get(), comm.get(), stream, instruction);
    if (!span.ok())
      return failed(span.status());
    if (absl::Status status = runDeviceInstruction(context, index);
        !status.ok())
      return failed(status);
    if (*span)
      if (absl::Status status = timeline->end(**span, stream); !status.ok())
        return failed(status);
    if (absl::Status status = mark(2 * index + 1); !status.ok())
      return failed(status);
    if (hooks.afterInstruction)
      hooks.afterInstruction(index, instruction);
    // As on the CPU, a diverged step leaves the weights as they were: the
    // optimizer writes nothing once the check records a non-finite loss or
    // norm, and the host learns it when the step ends.
    for (auto [readyAt, buffer, kind] :
         {std::make_tuple(lossReadyAt, program.loss, StepCheck::NonFiniteLoss),
          std::make_tuple(gradNormReadyAt, program.gradNorm,
                          StepCheck::NonFiniteNorm)}) {
      if (index != readyAt)
        continue;
      if (absl::Status status = recordIfNotFinite(context.f32(buffer), kind,
                                                  static_cast<uint32_t>(index),
                                                  context.check, stream);
          !status.ok())
        return failed(status);
    }
  }
  if (comm)
    if (absl::Status status = comm->finish(stream); !status.ok())
      return failed(status);
  {
    // The step's one wait before its results (the loss and norm read
    // below find the stream drained).
    StepCheck found{};
    if (absl::Status status = staging.read(&found, context.check,
                                           sizeof(StepCheck), stream, watch);
        !status.ok())
      return failed(status);
    if (absl::Status status = stepCheckStatus(program, found, step);
        !status.ok()) {
      drain();
      forgetTimeline();
      return status;
    }
  }
  StepResult result;
  for (auto [buffer, into] :
       {std::make_pair(program.loss, &result.loss),
        std::make_pair(program.gradNorm, &result.gradNorm),
        std::make_pair(program.lr, &result.lr)}) {
    absl::StatusOr<float> value = context.readScalar(buffer);
    if (!value.ok())
      return failed(value.status());
    *into = *value;
  }
  // Errors inside kernels surface at a synchronisation; this is the last.
  if (absl::Status status = synchronize(stream, watch); !status.ok())
    return failed(status);
  if (profiling)
    if (absl::Status status = addInstructionTimes(); !status.ok())
      return failed(status);
  if (absl::Status status = writeTimeline(); !status.ok())
    return failed(status);
  return result;
}

absl::Status CudaBackend::writeTimeline() {
  if (!timeline)
    return absl::OkStatus();
  if (comm)
    comm->traceAs(nullptr, "");
  return timeline->write();
}

void CudaBackend::forgetTimeline() {
  if (!timeline)
    return;
  if (comm)
    comm->traceAs(nullptr, "");
  timeline->discard();
}

absl::StatusOr<StepResult> CudaBackend::runPipelined(const int32_t *tokens,
                                                     const int32_t *targets,
                                                     int64_t step,
                                                     const StepHooks &hooks,
                                                     DeviceStep &context) {
  pipelineDevice->setStep(&context, &runnerPointers, comm.get());
  // Document masking is refused at load: no positions.
  absl::StatusOr<StepResult> result = pipelineStep->run(
      tokens, targets, /*positions=*/nullptr, step,
      {*pipelineDevice, runnerPointers, hooks, /*trace=*/nullptr});
  absl::Status finished = absl::OkStatus();
  // Deferred reductions the step's end needs, then every error a kernel
  // left: the step is over only when its streams are.
  if (result.ok() && comm)
    finished = comm->finish(stream);
  if (finished.ok())
    finished = synchronize(stream, context.watch);
  if (finished.ok() && profiling)
    finished = pipelineDevice->addTimes(opcodeTimes);
  if (finished.ok() && result.ok())
    finished = writeTimeline();
  else
    forgetTimeline();
  pipelineDevice->setStep(nullptr, nullptr, nullptr);
  if (!result.ok())
    return result.status();
  if (!finished.ok())
    return atStep(step, finished);
  return result;
}

absl::Status CudaBackend::addInstructionTimes() {
  for (size_t index = 0; index < prog->instructions.size(); ++index) {
    float milliseconds = 0;
    MOE_CUDA_OK(cudaEventElapsedTime(&milliseconds, profileEvents[2 * index],
                                     profileEvents[2 * index + 1]));
    auto &slot =
        opcodeTimes[static_cast<int>(prog->instructions[index].opcode)];
    slot.first += milliseconds / 1e3;
    ++slot.second;
  }
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::unique_ptr<Backend>>
createCudaBackend(std::shared_ptr<const Program> program,
                  const BackendOptions &options) {
  if (!program)
    return absl::InvalidArgumentError("cuda backend: no program");
  // The dispatch trusts every index and shape, as the CPU's does.
  if (absl::Status status = verifyProgram(*program); !status.ok())
    return absl::Status(status.code(),
                        absl::StrCat(options.artifactPath,
                                     ": invalid program: ", status.message()));
  if (absl::Status status = engine::checkJobSize(*program, options.world);
      !status.ok())
    return absl::Status(status.code(), absl::StrCat(options.artifactPath, ": ",
                                                    status.message()));
  absl::StatusOr<DeviceInfo> device = deviceOfThisProcess(options.world);
  if (!device.ok())
    return device.status();
  auto prefixed = [&](const absl::Status &status) {
    return absl::Status(
        status.code(),
        absl::StrCat("--device cuda (", device->name, "): ", status.message()));
  };
  // The backend's capability record (moe/Runtime/Capabilities.h), as at
  // load time, then this GPU's own: FP8 GEMMs compiled for an H100 are
  // refused on an A100 here, not midway through the first step.
  if (absl::Status status = checkCapabilities(*program, "the program", "cuda");
      !status.ok())
    return prefixed(status);
  for (size_t index = 0; index < program->instructions.size(); ++index)
    if (absl::Status status =
            checkFp8OnDevice(*program, index, device->computeCapability);
        !status.ok())
      return prefixed(status);
  int64_t rank = options.world ? options.world->rank() : 0;
  auto backend = std::make_unique<CudaBackend>(
      std::move(program), *device, rank, options.profile, options.trace,
      options.expertChunks);
  if (absl::Status status = backend->setUp(options.world); !status.ok())
    return prefixed(status);
  return backend;
}

} // namespace moe::rt::cuda
