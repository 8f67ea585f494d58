//===- Executor.cpp - run a verified training step on the CPU -------------===//
//
// Storage layout: parameters, optimizer state and inputs are packed, each at
// a 64-byte aligned offset, into one persistent allocation; temporaries live
// at their planned offsets in one arena. A step is a straight walk over the
// instructions; see Dispatch.cpp for the kernel calls and Collectives.cpp
// for the communication.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Engine/Executor.h"

#include "AlignedBuffer.h"
#include "AsyncCollectives.h"
#include "Collectives.h"
#include "Dispatch.h"
#include "ExpertParallel.h"
#include "HostPipelineDevice.h"
#include "moe/Runtime/Engine/HostWeights.h"
#include "moe/Runtime/Engine/LossSlice.h"
#include "moe/Runtime/Engine/PipelineStep.h"
#include "moe/Runtime/Engine/Placement.h"
#include "moe/Runtime/Engine/ProgramGroups.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include "absl/strings/str_cat.h"

#include "Bf16Staging.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

namespace moe::rt {

using engine::AlignedBuffer;

struct Executor::Storage {
  AlignedBuffer persistent;
  AlignedBuffer arena;
  std::vector<uint8_t *> pointers;
  // Strided collectives pack their blocks here (see Collectives.h).
  std::vector<float> packScratch;
  // The program with BF16 buffers declared F32, for the instructions run
  // on fp32 images of them (engine/Bf16Staging.h); empty when none is BF16.
  std::optional<Program> widened;
  // Working copies (mixed precision), each with its master and, where
  // ZeRO-1 makes the master a block of the copy's rows, the group that
  // gathers it (the group of the ShardedAdamW updating it).
  struct WorkingCopy {
    uint32_t copy, master;
    std::optional<int64_t> gatheredOver;
  };
  std::vector<WorkingCopy> workingCopies;
  // Whether each buffer is the master of a working copy.
  std::vector<bool> isMaster;
  // Whether a master may have been written since the copies were derived
  // from it: set when a master's storage is handed out for writing, cleared
  // by refreshWorkingCopies(). A step's AdamW writes master and copy
  // together, so steady-state steps do not refresh.
  bool mastersTouched = true;
};

namespace {

/// The last instruction whose results include `buffer` (the verifier
/// guarantees there is one for the program's outputs).
size_t lastWriterOf(const Program &program, uint32_t buffer) {
  size_t writer = 0;
  for (size_t i = 0; i < program.instructions.size(); ++i)
    for (uint32_t result : program.instructions[i].results)
      if (result == buffer)
        writer = i;
  return writer;
}

absl::Status nonFinite(int64_t step, const char *what, float value) {
  return absl::InvalidArgumentError(
      atStep(step, absl::StrCat(what, " is not finite (", value, ")")));
}

} // namespace

Executor::Executor(std::shared_ptr<const Program> program)
    : prog(std::move(program)), storage(std::make_unique<Storage>()) {}

Executor::~Executor() = default;

uint64_t Executor::bytesPerRank(const Program &program) {
  // Kernel scratch: strided collectives' packing, and the experts' gathered
  // rows or attention's blocks, one instruction at a time.
  uint64_t pack = engine::packElements(program) * sizeof(float);
  if (program.pipeline.enabled()) {
    // Each rank runs the kernels of its own stages only.
    uint64_t most = 0;
    for (int32_t rank = 0; rank < program.pipeline.stages; ++rank)
      most = std::max(most, engine::pipelineRankBytes(program, rank) +
                                engine::kernelWorkspaceBytes(program, rank));
    return most + pack;
  }
  uint64_t bytes =
      program.arenaBytes + pack + engine::kernelWorkspaceBytes(program);
  for (const Buffer &buffer : program.buffers)
    if (buffer.kind != BufferKind::Temporary)
      bytes += buffer.sizeInBytes();
  return bytes;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::create(Program program,
                                                           comm::World *world) {
  return create(std::make_shared<const Program>(std::move(program)), world);
}

absl::StatusOr<std::unique_ptr<Executor>>
Executor::create(std::shared_ptr<const Program> program, comm::World *world) {
  if (!program)
    return absl::InvalidArgumentError("executor: no program");
  // The dispatch trusts every index and shape; a Program built in memory
  // has not necessarily been through readArtifact.
  if (absl::Status status = verifyProgram(*program); !status.ok())
    return absl::Status(
        status.code(),
        absl::StrCat("executor: invalid program: ", status.message()));
  std::unique_ptr<Executor> executor(new Executor(std::move(program)));
  if (absl::Status status = executor->connect(world); !status.ok())
    return status;
  if (absl::Status status = executor->allocate(); !status.ok())
    return status;
  return executor;
}

absl::Status Executor::connect(comm::World *world) {
  if (absl::Status status = engine::checkJobSize(*prog, world); !status.ok())
    return status;
  placement =
      std::make_unique<engine::Placement>(*prog, world ? world->rank() : 0);
  threadsMayCommunicate =
      world && (world->threadLevel() == comm::ThreadLevel::Serialized ||
                world->threadLevel() == comm::ThreadLevel::Multiple);
  threadsCommunicateAtOnce =
      world && world->threadLevel() == comm::ThreadLevel::Multiple;
  if (absl::Status status = connectStages(world); !status.ok())
    return status;
  absl::StatusOr<comm::World *> job = engine::jobWorldOf(world, localWorld);
  if (!job.ok())
    return job.status();
  jobWorld = *job;
  absl::StatusOr<std::vector<std::unique_ptr<comm::Group>>> created =
      engine::createProgramGroups(*prog, *jobWorld);
  if (!created.ok())
    return created.status();
  groups = std::move(*created);
  return absl::OkStatus();
}

absl::Status Executor::connectStages(comm::World *world) {
  const Pipeline &pipeline = prog->pipeline;
  if (!pipeline.enabled())
    return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<comm::Group>> group =
      engine::createStageGroup(*prog, world);
  if (!group.ok())
    return absl::Status(group.status().code(),
                        absl::StrCat("executor: ", group.status().message()));
  stageGroup = std::move(*group);
  int32_t stageRank = engine::pipelineRankOf(*prog, placement->rank());
  absl::StatusOr<std::unique_ptr<engine::PipelineStep>> runner =
      engine::PipelineStep::create(*prog, stageRank, stageGroup.get());
  if (!runner.ok())
    return runner.status();
  pipelineStep = std::move(*runner);
  pipelineDevice = std::make_unique<engine::HostPipelineDevice>();
  return absl::OkStatus();
}

absl::Status Executor::allocate() {
  const std::vector<Buffer> &buffers = prog->buffers;
  std::vector<uint64_t> offsets(buffers.size(), 0);
  uint64_t persistentBytes = 0;
  std::vector<uint32_t> absent;
  for (uint32_t b = 0; b < buffers.size(); ++b) {
    const Buffer &buffer = buffers[b];
    uint64_t size = buffer.sizeInBytes();
    // Another pipeline stage's weights: no storage here.
    if (pipelineStep && !pipelineStep->holds(b)) {
      absent.push_back(b);
      continue;
    }
    if (buffer.kind == BufferKind::Parameter) {
      params.push_back(b);
      parameterBytes += size;
    } else if (buffer.kind == BufferKind::OptimizerState) {
      states.push_back(b);
      stateBytes += size;
    }
    if (buffer.kind == BufferKind::Temporary)
      continue;
    // Sizes are < 2^63 each (verified); only the sum can overflow.
    uint64_t padded =
        (size + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    offsets[b] = persistentBytes;
    if (__builtin_add_overflow(persistentBytes, padded, &persistentBytes))
      return absl::ResourceExhaustedError(
          "executor: persistent buffers exceed the address space");
  }

  absl::StatusOr<AlignedBuffer> persistent = AlignedBuffer::allocate(
      persistentBytes, "parameters, optimizer state and inputs");
  if (!persistent.ok())
    return persistent.status();
  // A pipelined step runs in its microbatch slots' arenas instead.
  absl::StatusOr<AlignedBuffer> arena = AlignedBuffer::allocate(
      pipelineStep ? 0 : prog->arenaBytes, "temporary arena");
  if (!arena.ok())
    return arena.status();
  storage->persistent = std::move(*persistent);
  storage->arena = std::move(*arena);

  storage->pointers.resize(buffers.size());
  for (uint32_t b = 0; b < buffers.size(); ++b) {
    bool temporary = buffers[b].kind == BufferKind::Temporary;
    storage->pointers[b] = temporary ? storage->arena.data() + buffers[b].offset
                                     : storage->persistent.data() + offsets[b];
  }
  for (uint32_t b : absent)
    storage->pointers[b] = nullptr;
  if (pipelineStep)
    if (absl::Status status =
            pipelineStep->reserve(*pipelineDevice, storage->pointers);
        !status.ok())
      return status;
  storage->packScratch.resize(engine::packElements(*prog));
  bool anyBf16 = false;
  storage->isMaster.assign(buffers.size(), false);
  std::map<uint32_t, int64_t> gatheredOver;
  for (const Instruction &inst : prog->instructions)
    if (inst.opcode == Opcode::ShardedAdamW) {
      ops::ShardedAdamWView update(inst);
      if (std::optional<uint32_t> working = update.working())
        gatheredOver[*working] = update.group();
    }
  for (uint32_t b = 0; b < buffers.size(); ++b) {
    anyBf16 |= buffers[b].dtype == DType::BF16;
    if (buffers[b].kind == BufferKind::WorkingCopy) {
      std::optional<int64_t> group;
      if (auto found = gatheredOver.find(b); found != gatheredOver.end())
        group = found->second;
      storage->workingCopies.push_back({b, buffers[b].master, group});
      storage->isMaster[buffers[b].master] = true;
    }
  }
  if (anyBf16)
    storage->widened = engine::widenBf16Buffers(*prog);
  lossReadyAt = lastWriterOf(*prog, prog->loss);
  gradNormReadyAt = lastWriterOf(*prog, prog->gradNorm);
  return absl::OkStatus();
}

void Executor::initialize(uint64_t seed) {
  engine::initializeWeights(*this, seed);
  // The copies ZeRO-1 gathers are left to the next step, which reports a
  // failure to gather them.
  storage->mastersTouched = true;
  bool anyGathered = std::any_of(
      storage->workingCopies.begin(), storage->workingCopies.end(),
      [](const Storage::WorkingCopy &c) { return c.gatheredOver.has_value(); });
  if (!anyGathered)
    (void)refreshWorkingCopies();
}

absl::Status Executor::refreshWorkingCopies() {
  for (const Storage::WorkingCopy &c : storage->workingCopies) {
    uint32_t copy = c.copy, master = c.master;
    // A pipeline rank holds only its own stages' weights (and copies).
    if (!storage->pointers[master] || !storage->pointers[copy])
      continue;
    const auto *from =
        reinterpret_cast<const float *>(storage->pointers[master]);
    if (!c.gatheredOver) {
      cpu::castToBf16(from,
                      reinterpret_cast<uint16_t *>(storage->pointers[copy]),
                      prog->buffers[copy].numElements());
      continue;
    }
    // ZeRO-1: each rank rounds its block of the master's rows, and the
    // group gathers them into the whole copy (as ShardedAdamW does).
    absl::Status gathered = engine::gatherRows(
        *groups[*c.gatheredOver], from, prog->buffers[master].numElements(),
        storage->pointers[copy], DType::BF16);
    if (!gathered.ok())
      return absl::Status(gathered.code(),
                          absl::StrCat("gathering the working copy '",
                                       prog->buffers[copy].name,
                                       "': ", gathered.message()));
  }
  storage->mastersTouched = false;
  return absl::OkStatus();
}

void Executor::noteWrite(uint32_t buffer) {
  if (storage->isMaster[buffer])
    storage->mastersTouched = true;
}

int64_t Executor::rank() const { return placement->rank(); }

absl::StatusOr<std::unique_ptr<comm::Group>>
Executor::createGroup(const AxisList &axes) const {
  return jobWorld->group(comm::Mesh{prog->meshAxes, prog->meshShape}, axes);
}

const std::vector<int64_t> &Executor::coordinates() const {
  return placement->coordinates();
}

BatchBlock Executor::batchBlock() const {
  return {placement->blockIndex(prog->batchAxes),
          prog->partsOf(prog->batchAxes)};
}

std::vector<int64_t> Executor::globalShape(uint32_t buffer) const {
  if (buffer >= prog->buffers.size())
    return {};
  return placement->globalShape(prog->buffers[buffer]);
}

float *Executor::data(uint32_t buffer) {
  if (buffer >= prog->buffers.size() ||
      prog->buffers[buffer].dtype != DType::F32)
    return nullptr;
  noteWrite(buffer);
  return reinterpret_cast<float *>(storage->pointers[buffer]);
}

const float *Executor::data(uint32_t buffer) const {
  if (buffer >= prog->buffers.size() ||
      prog->buffers[buffer].dtype != DType::F32)
    return nullptr;
  return reinterpret_cast<const float *>(storage->pointers[buffer]);
}

int32_t *Executor::ids(uint32_t buffer) {
  if (buffer >= prog->buffers.size() ||
      prog->buffers[buffer].dtype != DType::I32)
    return nullptr;
  return reinterpret_cast<int32_t *>(storage->pointers[buffer]);
}

const int32_t *Executor::ids(uint32_t buffer) const {
  return const_cast<Executor *>(this)->ids(buffer);
}

uint8_t *Executor::bytes(uint32_t buffer) {
  if (buffer >= prog->buffers.size())
    return nullptr;
  noteWrite(buffer);
  return storage->pointers[buffer];
}

const uint8_t *Executor::bytes(uint32_t buffer) const {
  if (buffer >= prog->buffers.size())
    return nullptr;
  return storage->pointers[buffer];
}

std::optional<uint32_t> Executor::findBuffer(std::string_view name) const {
  for (uint32_t b = 0; b < prog->buffers.size(); ++b) {
    const Buffer &buffer = prog->buffers[b];
    if (buffer.kind != BufferKind::Temporary && buffer.name == name)
      return b;
  }
  return std::nullopt;
}

int64_t Executor::tokensPerStep() const {
  return prog->buffers[prog->tokens].numElements() * microbatches();
}

bool Executor::setAsyncCollectives(bool on) {
  asyncCollectives.reset();
  if (on && threadsMayCommunicate && !pipelineStep && !prog->groups.empty())
    asyncCollectives = std::make_unique<engine::AsyncCollectives>(
        *prog, threadsCommunicateAtOnce);
  return asyncCollectives != nullptr;
}

absl::Status Executor::sumOverStages(absl::Span<double> values) {
  if (!stageGroup)
    return absl::OkStatus();
  return comm::sumOverGroup(*stageGroup, values, {});
}

int64_t Executor::microbatches() const {
  return prog->pipeline.enabled() ? prog->pipeline.microbatches : 1;
}

uint64_t Executor::arenaBytes() const {
  return pipelineStep ? prog->arenaBytes * pipelineStep->slotsAllocated()
                      : prog->arenaBytes;
}

std::string atStep(int64_t step, absl::string_view message) {
  return absl::StrCat("step ", stepNumber(step), ": ", message);
}

absl::Status atStep(int64_t step, const absl::Status &status) {
  return absl::Status(status.code(), atStep(step, status.message()));
}

absl::Status checkStepInputs(const Program &program, const int32_t *tokens,
                             const int32_t *targets, const int32_t *positions,
                             int64_t step) {
  if (!tokens || !targets)
    return absl::InvalidArgumentError(
        atStep(step, "missing tokens or targets"));
  if (program.positions >= 0 && !positions)
    return absl::InvalidArgumentError(
        atStep(step, "missing the tokens' document positions (the program "
                     "has document masking)"));
  if (program.positions < 0 && positions)
    return absl::InvalidArgumentError(
        atStep(step, "document positions given to a program without "
                     "document masking"));
  if (step < 0 || step > std::numeric_limits<int32_t>::max())
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " is outside [0, ",
                     std::numeric_limits<int32_t>::max(), "]"));
  return absl::OkStatus();
}

absl::Status Executor::prepareStep(const int32_t *tokens,
                                   const int32_t *targets,
                                   const int32_t *positions, int64_t step) {
  if (absl::Status status =
          checkStepInputs(*prog, tokens, targets, positions, step);
      !status.ok())
    return status;
  *ids(prog->step) = static_cast<int32_t>(step);
  // Masters may have been initialised, loaded or set since the last step.
  if (storage->mastersTouched)
    if (absl::Status status = refreshWorkingCopies(); !status.ok())
      return atStep(step, status);
  return absl::OkStatus();
}

engine::StepContext Executor::stepContext() {
  engine::StepContext context{*prog, storage->pointers, groups,
                              storage->packScratch};
  if (storage->widened)
    context.widened = &*storage->widened;
  context.trace = traceTo;
  context.expertChunks = expertChunks;
  context.overlapExperts = threadsMayCommunicate && expertChunks > 1;
  context.threadsMayCommunicate = threadsMayCommunicate;
  return context;
}

void Executor::copyInputs(const int32_t *tokens, const int32_t *targets,
                          const int32_t *positions) {
  size_t count = static_cast<size_t>(tokensPerStep());
  std::memcpy(ids(prog->tokens), tokens, count * sizeof(int32_t));
  std::memcpy(ids(prog->targets), targets, count * sizeof(int32_t));
  if (prog->positions >= 0)
    std::memcpy(ids(static_cast<uint32_t>(prog->positions)), positions,
                count * sizeof(int32_t));
}

absl::StatusOr<float> Executor::evaluate(const int32_t *tokens,
                                         const int32_t *targets, int64_t step,
                                         const int32_t *positions) {
  if (absl::Status status = prepareStep(tokens, targets, positions, step);
      !status.ok())
    return status;
  if (!evalSlice) {
    absl::StatusOr<engine::LossSlice> slice = engine::lossSlice(*prog);
    if (!slice.ok())
      return slice.status();
    evalSlice = std::make_unique<engine::LossSlice>(std::move(*slice));
  }
  // What the slice changes of the state (FP8 amax histories), put back
  // after: an evaluation leaves the run as it found it.
  std::vector<std::vector<uint8_t>> saved;
  for (uint32_t b : evalSlice->changedState) {
    const uint8_t *from = storage->pointers[b];
    saved.emplace_back(from, from + prog->buffers[b].sizeInBytes());
  }
  engine::StepContext context = stepContext();
  absl::StatusOr<float> loss;
  if (pipelineStep) {
    StepHooks none;
    pipelineDevice->setContext(&context);
    loss = pipelineStep->evaluate(
        tokens, targets, positions, step, evalSlice->runs, evalSlice->value,
        {*pipelineDevice, storage->pointers, none, context.trace});
    pipelineDevice->setContext(nullptr);
  } else {
    copyInputs(tokens, targets, positions);
    loss = 0.0f;
    for (size_t index = 0; index < prog->instructions.size() && loss.ok();
         ++index)
      if (evalSlice->runs[index])
        if (absl::Status status = engine::runInstruction(context, index);
            !status.ok())
          loss = atStep(step, status);
    if (loss.ok())
      loss = *data(evalSlice->value);
  }
  for (size_t i = 0; i < saved.size(); ++i)
    std::memcpy(storage->pointers[evalSlice->changedState[i]], saved[i].data(),
                saved[i].size());
  if (loss.ok() && !std::isfinite(*loss))
    return absl::InvalidArgumentError(atStep(
        step, absl::StrCat("evaluation loss is not finite (", *loss, ")")));
  return loss;
}

absl::StatusOr<StepResult>
Executor::runStep(const int32_t *tokens, const int32_t *targets, int64_t step,
                  const StepHooks &hooks, const int32_t *positions) {
  if (absl::Status status = prepareStep(tokens, targets, positions, step);
      !status.ok())
    return status;
  engine::StepContext context = stepContext();
  if (pipelineStep) {
    pipelineDevice->setContext(&context);
    absl::StatusOr<StepResult> result = pipelineStep->run(
        tokens, targets, positions, step,
        {*pipelineDevice, storage->pointers, hooks, context.trace});
    pipelineDevice->setContext(nullptr);
    return result;
  }
  copyInputs(tokens, targets, positions);

  for (size_t index = 0; index < prog->instructions.size(); ++index) {
    const Instruction &instruction = prog->instructions[index];
    if (hooks.beforeInstruction)
      hooks.beforeInstruction(index, instruction);
    absl::Status status =
        asyncCollectives ? asyncCollectives->run(context, index)
                         : engine::runInstruction(context, index);
    if (!status.ok()) {
      if (asyncCollectives)
        asyncCollectives->drain(context).IgnoreError();
      return atStep(step, status);
    }
    if (hooks.afterInstruction)
      hooks.afterInstruction(index, instruction);
    // Checked where they are produced, so that a diverged step stops before
    // the optimizer writes non-finite values into the weights.
    if (index == lossReadyAt && !std::isfinite(*data(prog->loss)))
      return nonFinite(step, "loss", *data(prog->loss));
    if (index == gradNormReadyAt && !std::isfinite(*data(prog->gradNorm)))
      return nonFinite(step, "gradient norm", *data(prog->gradNorm));
  }

  if (asyncCollectives)
    if (absl::Status status = asyncCollectives->drain(context); !status.ok())
      return atStep(step, status);
  StepResult result;
  result.loss = *data(prog->loss);
  result.gradNorm = *data(prog->gradNorm);
  result.lr = *data(prog->lr);
  if (!std::isfinite(result.loss))
    return nonFinite(step, "loss", result.loss);
  return result;
}

} // namespace moe::rt
