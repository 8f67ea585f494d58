//===- PipelineStep.cpp - run a step over microbatches and stages ---------===//

#include "moe/Runtime/Engine/PipelineStep.h"

#include "Dispatch.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/Engine/Placement.h"
#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/PipelineOrder.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace moe::rt::engine {
namespace {

// Point-to-point tags are 0..32767 (comm::Group); one per transfer and
// microbatch keeps every message of a step apart.
constexpr int64_t kMaxTags = 32768;

constexpr int kActionKinds = 4;

size_t kindIndex(PipelineAction::Kind kind) { return static_cast<size_t>(kind); }

/// The microbatches `rank` holds at once (pipeline::peakOpenMicrobatches).
size_t peakSlots(const Pipeline &pipeline, int32_t rank) {
  std::vector<int> order;
  for (const PipelineAction &action : pipeline.ranks[rank])
    order.push_back(action.microbatch);
  return pipeline::peakOpenMicrobatches(order);
}

uint64_t padded(uint64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Whether one of `stages` runs on pipeline rank `rank`.
bool onRank(const std::vector<int32_t> &stages, const Pipeline &pipeline,
            int32_t rank) {
  return std::any_of(stages.begin(), stages.end(), [&](int32_t stage) {
    return stage >= 0 && stage % pipeline.stages == rank;
  });
}

} // namespace

uint64_t pipelineRankBytes(const Program &program, int32_t rank) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<std::vector<int32_t>> stages = persistentBufferStages(program);
  uint64_t bytes = 0;
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    bool stageBound = buffer.kind == BufferKind::Parameter ||
                      buffer.kind == BufferKind::OptimizerState ||
                      buffer.kind == BufferKind::WorkingCopy;
    if (buffer.kind != BufferKind::Temporary &&
        (!stageBound || onRank(stages[b], pipeline, rank)))
      bytes += padded(buffer.sizeInBytes());
  }
  for (auto [b, stage] : optimizerSums(program, rank))
    bytes += program.buffers[b].sizeInBytes();
  // Each slot's arena and its own tokens and targets (and positions).
  uint64_t inputs = program.positions >= 0 ? 3 : 2;
  uint64_t slot =
      program.arenaBytes +
      inputs * padded(program.buffers[program.tokens].sizeInBytes());
  return bytes + slot * peakSlots(pipeline, rank);
}

std::vector<std::pair<uint32_t, int32_t>>
optimizerSums(const Program &program, int32_t rank) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<int64_t> producer = program.lastWriters();
  std::vector<bool> seen(program.buffers.size(), false);
  std::vector<std::pair<uint32_t, int32_t>> sums;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    if (pipeline.instructionPhase[i] != PipelinePhase::Optimizer ||
        !pipeline.runsOn(i, rank))
      continue;
    for (uint32_t b : program.instructions[i].operands) {
      int64_t p = producer[b];
      if (p < 0 || seen[b] ||
          pipeline.instructionPhase[p] == PipelinePhase::Optimizer ||
          pipeline.instructionStage[p] % pipeline.stages != rank)
        continue;
      seen[b] = true;
      sums.emplace_back(b, pipeline.instructionStage[p]);
    }
  }
  return sums;
}

std::vector<StageTransfer> stageTransfers(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<int64_t> producer = program.lastWriters();
  std::map<std::pair<uint32_t, int32_t>, StageTransfer> byBufferAndRank;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    PipelinePhase phase = pipeline.instructionPhase[i];
    if (phase == PipelinePhase::Optimizer)
      continue;
    int32_t stage = pipeline.instructionStage[i];
    int32_t toRank = stage % pipeline.stages;
    for (uint32_t b : program.instructions[i].operands) {
      if (program.buffers[b].kind != BufferKind::Temporary || producer[b] < 0)
        continue;
      size_t p = static_cast<size_t>(producer[b]);
      int32_t fromStage = pipeline.instructionStage[p];
      // Chunks of one rank share the microbatch's slot: nothing to move.
      if (fromStage % pipeline.stages == toRank)
        continue;
      StageTransfer &transfer = byBufferAndRank[{b, toRank}];
      transfer.buffer = b;
      transfer.fromStage = fromStage;
      transfer.fromPhase = pipeline.instructionPhase[p];
      transfer.toRank = toRank;
      std::pair<int32_t, PipelinePhase> reader{stage, phase};
      if (std::find(transfer.readers.begin(), transfer.readers.end(),
                    reader) == transfer.readers.end())
        transfer.readers.push_back(reader);
    }
  }
  std::vector<StageTransfer> transfers;
  for (auto &[key, transfer] : byBufferAndRank)
    transfers.push_back(std::move(transfer));
  return transfers;
}

int32_t pipelineRankOf(const Program &program, int64_t worldRank) {
  if (!program.pipeline.enabled() || program.pipeline.stages <= 1)
    return 0;
  return static_cast<int32_t>(Placement(program, worldRank).coordinates()[0]);
}

absl::StatusOr<std::unique_ptr<comm::Group>>
createStageGroup(const Program &program, comm::World *world) {
  if (!program.pipeline.enabled() || program.pipeline.stages <= 1)
    return std::unique_ptr<comm::Group>();
  if (!world)
    return absl::InternalError("pipeline: no world to group the stages in");
  // Verified: "pp" is mesh axis 0, so the world holds every stage.
  absl::StatusOr<std::unique_ptr<comm::Group>> group =
      world->group(comm::Mesh{program.meshAxes, program.meshShape}, {"pp"});
  if (!group.ok())
    return absl::Status(group.status().code(),
                        absl::StrCat("cannot create the group of the "
                                     "pipeline stages: ",
                                     group.status().message()));
  return group;
}

std::vector<bool> heldBuffers(const Program &program, int32_t rank) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<bool> held(program.buffers.size(), true);
  if (!pipeline.enabled())
    return held;
  std::vector<std::vector<int32_t>> stages = persistentBufferStages(program);
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    BufferKind kind = program.buffers[b].kind;
    if (kind == BufferKind::Parameter || kind == BufferKind::OptimizerState ||
        kind == BufferKind::WorkingCopy)
      held[b] = onRank(stages[b], pipeline, rank);
  }
  return held;
}

struct PipelineStep::Slot {
  std::vector<uint8_t *> pointers;
  std::vector<bool> received; // by transfer
  bool inUse = false;
};

struct PipelineStep::PendingSend {
  std::vector<uint8_t> bytes;
  comm::Request request;
};

PipelineStep::PipelineStep(const Program &program, int32_t rank,
                           comm::Group *stageGroup)
    : program(program), rank(rank), stageGroup(stageGroup) {}

PipelineStep::~PipelineStep() {
  // Unfinished sends wait (with the deadline) in their Request's destructor.
  pendingSends.clear();
}

absl::StatusOr<std::unique_ptr<PipelineStep>>
PipelineStep::create(const Program &program, int32_t rank,
                     comm::Group *stageGroup) {
  const Pipeline &pipeline = program.pipeline;
  if (pipeline.stages > 1 &&
      (!stageGroup || stageGroup->size() != pipeline.stages))
    return absl::InternalError("pipeline: no group over the stages");
  std::unique_ptr<PipelineStep> runner(
      new PipelineStep(program, rank, stageGroup));
  runner->transfers = stageTransfers(program);
  if (static_cast<int64_t>(runner->transfers.size()) * pipeline.microbatches >
      kMaxTags)
    return absl::UnimplementedError(absl::StrCat(
        "pipeline: ", runner->transfers.size(), " stage-to-stage values x ",
        pipeline.microbatches, " microbatches need more than ", kMaxTags,
        " message tags"));

  runner->held = heldBuffers(program, rank);

  std::vector<int64_t> producer = program.lastWriters();
  runner->instructionsOf.resize(pipeline.modelStages() * kActionKinds);
  // What the optimizer reads of the microbatches is summed over them.
  for (auto [b, stage] : optimizerSums(program, rank)) {
    runner->gradients.push_back(b);
    runner->gradientStages.push_back(stage);
  }
  runner->foreign.assign(program.buffers.size(), false);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    int32_t stage = pipeline.instructionStage[i];
    PipelinePhase phase = pipeline.instructionPhase[i];
    const Instruction &inst = program.instructions[i];
    if (isAdamW(inst.opcode) && stage % pipeline.stages != rank)
      runner->foreign[inst.operands[1]] = true;
    if (phase == PipelinePhase::Optimizer) {
      if (pipeline.runsOn(i, rank))
        runner->optimizerInstructions.push_back(i);
      continue;
    }
    for (int k = 0; k < kActionKinds; ++k)
      if (actionRuns(static_cast<PipelineAction::Kind>(k), phase))
        runner->instructionsOf[stage * kActionKinds + k].push_back(i);
  }
  runner->lossStage = pipeline.instructionStage[producer[program.loss]];
  runner->producers = producer;
  runner->readLoss = program.loss;
  runner->readLossStage = runner->lossStage;
  return runner;
}

std::vector<uint32_t> PipelineStep::microbatchInputs() const {
  std::vector<uint32_t> inputs = {program.tokens, program.targets};
  if (program.positions >= 0)
    inputs.push_back(static_cast<uint32_t>(program.positions));
  return inputs;
}

absl::StatusOr<PipelineStep::Slot *>
PipelineStep::acquire(int32_t microbatch, Device &device,
                      const std::vector<uint8_t *> &base,
                      const std::vector<const int32_t *> &hostInputs) {
  Slot *slot = nullptr;
  for (const std::unique_ptr<Slot> &candidate : slots)
    if (!candidate->inUse) {
      slot = candidate.get();
      break;
    }
  std::vector<uint32_t> inputs = microbatchInputs();
  uint64_t inputBytes = program.buffers[program.tokens].sizeInBytes();
  uint64_t inputStride = padded(inputBytes);
  if (!slot) {
    auto fresh = std::make_unique<Slot>();
    absl::StatusOr<uint8_t *> arena = device.allocate(
        program.arenaBytes,
        absl::StrCat("arena of microbatch slot ", slots.size()));
    if (!arena.ok())
      return arena.status();
    absl::StatusOr<uint8_t *> memory = device.allocate(
        inputs.size() * inputStride, "microbatch tokens and targets");
    if (!memory.ok())
      return memory.status();
    fresh->pointers = base;
    for (uint32_t b = 0; b < program.buffers.size(); ++b)
      if (program.buffers[b].kind == BufferKind::Temporary)
        fresh->pointers[b] = *arena + program.buffers[b].offset;
    for (size_t i = 0; i < inputs.size(); ++i)
      fresh->pointers[inputs[i]] = *memory + i * inputStride;
    slots.push_back(std::move(fresh));
    slot = slots.back().get();
  }
  slot->inUse = true;
  slot->received.assign(transfers.size(), false);
  if (microbatch >= 0) {
    size_t count = inputBytes / sizeof(int32_t);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (absl::Status status =
              device.upload(slot->pointers[inputs[i]],
                            hostInputs[i] + microbatch * count, inputBytes);
          !status.ok())
        return status;
  }
  return slot;
}

absl::Status PipelineStep::reserve(Device &device,
                                   const std::vector<uint8_t *> &base) {
  for (size_t g = gradientSums.size(); g < gradients.size(); ++g) {
    const Buffer &buffer = program.buffers[gradients[g]];
    absl::StatusOr<uint8_t *> sum = device.allocate(
        buffer.sizeInBytes(),
        absl::StrCat("sum over the microbatches of ", buffer.name));
    if (!sum.ok())
      return sum.status();
    gradientSums.push_back(reinterpret_cast<float *>(*sum));
  }
  size_t peak = peakSlots(program.pipeline, rank);
  std::vector<Slot *> taken;
  while (slots.size() < peak) {
    absl::StatusOr<Slot *> slot = acquire(-1, device, base, {});
    if (!slot.ok())
      return slot.status();
    taken.push_back(*slot);
  }
  for (Slot *slot : taken)
    slot->inUse = false;
  return absl::OkStatus();
}

absl::StatusOr<float> PipelineStep::readScalar(Device &device, const Slot &slot,
                                               uint32_t buffer) const {
  float value = 0.0f;
  if (absl::Status status =
          device.download(&value, slot.pointers[buffer], sizeof(float));
      !status.ok())
    return status;
  return value;
}

absl::Status PipelineStep::receive(const PipelineAction &action, Slot &slot,
                                   Device &device) {
  int32_t stage = action.chunk * program.pipeline.stages + rank;
  for (size_t t = 0; t < transfers.size(); ++t) {
    const StageTransfer &transfer = transfers[t];
    if (transfer.toRank != rank || slot.received[t] || !travels(t))
      continue;
    bool reads = false;
    for (const auto &[readerStage, phase] : transfer.readers)
      reads |= readerStage == stage && actionRuns(action.kind, phase);
    if (!reads)
      continue;
    const Buffer &buffer = program.buffers[transfer.buffer];
    int peer = transfer.fromStage % program.pipeline.stages;
    int tag = static_cast<int>(t * program.pipeline.microbatches +
                               action.microbatch);
    // Every dtype travels as its bytes, in 4-byte words (a BF16 buffer's
    // need not fill the last), through a host copy.
    std::vector<int32_t> words((buffer.sizeInBytes() + 3) / 4);
    absl::StatusOr<comm::Request> request =
        buffer.dtype == DType::F32
            ? stageGroup->startRecv(
                  absl::MakeSpan(reinterpret_cast<float *>(words.data()),
                                 buffer.numElements()),
                  peer, tag)
            : stageGroup->startRecv(absl::MakeSpan(words), peer, tag);
    io::TraceScope span(trace, io::TraceTrack::Communication,
                        absl::StrCat("recv ", buffer.name, " mb ",
                                     action.microbatch));
    absl::Status status = request.ok() ? request->wait() : request.status();
    if (status.ok())
      status = device.upload(slot.pointers[transfer.buffer], words.data(),
                             buffer.sizeInBytes());
    if (!status.ok())
      return absl::Status(
          status.code(),
          absl::StrCat("pipeline rank ", rank, ": receiving ", buffer.name,
                       " of microbatch ", action.microbatch, " from rank ",
                       peer, ": ", status.message()));
    slot.received[t] = true;
  }
  return absl::OkStatus();
}

absl::Status PipelineStep::send(const PipelineAction &action, Slot &slot,
                                Device &device) {
  int32_t stage = action.chunk * program.pipeline.stages + rank;
  for (size_t t = 0; t < transfers.size(); ++t) {
    const StageTransfer &transfer = transfers[t];
    if (transfer.fromStage != stage ||
        !actionRuns(action.kind, transfer.fromPhase) || !travels(t))
      continue;
    const Buffer &buffer = program.buffers[transfer.buffer];
    int tag = static_cast<int>(t * program.pipeline.microbatches +
                               action.microbatch);
    io::TraceScope span(trace, io::TraceTrack::Communication,
                        absl::StrCat("send ", buffer.name, " mb ",
                                     action.microbatch));
    // A host copy, so that the slot may be reused before the peer has it.
    auto pending = std::make_unique<PendingSend>();
    // Whole 4-byte words (a BF16 buffer's bytes need not fill the last).
    size_t words = (buffer.sizeInBytes() + 3) / 4;
    pending->bytes.assign(words * 4, 0);
    if (absl::Status status = device.download(pending->bytes.data(),
                                              slot.pointers[transfer.buffer],
                                              buffer.sizeInBytes());
        !status.ok())
      return status;
    absl::StatusOr<comm::Request> request =
        buffer.dtype == DType::F32
            ? stageGroup->startSend(
                  absl::MakeConstSpan(
                      reinterpret_cast<const float *>(pending->bytes.data()),
                      buffer.numElements()),
                  transfer.toRank, tag)
            : stageGroup->startSend(
                  absl::MakeConstSpan(
                      reinterpret_cast<const int32_t *>(pending->bytes.data()),
                      words),
                  transfer.toRank, tag);
    if (!request.ok())
      return absl::Status(
          request.status().code(),
          absl::StrCat("pipeline rank ", rank, ": sending ", buffer.name,
                       " of microbatch ", action.microbatch, " to rank ",
                       transfer.toRank, ": ", request.status().message()));
    pending->request = std::move(*request);
    pendingSends.push_back(std::move(pending));
  }
  return finishSends(false);
}

absl::Status PipelineStep::finishSends(bool all) {
  std::vector<std::unique_ptr<PendingSend>> open;
  for (std::unique_ptr<PendingSend> &pending : pendingSends) {
    absl::Status status;
    if (all) {
      status = pending->request.wait();
    } else {
      absl::StatusOr<bool> done = pending->request.test();
      status = done.status();
      if (done.ok() && !*done) {
        open.push_back(std::move(pending));
        continue;
      }
    }
    if (!status.ok())
      return absl::Status(status.code(),
                          absl::StrCat("pipeline rank ", rank,
                                       ": a send to the next or previous "
                                       "stage failed: ",
                                       status.message()));
  }
  pendingSends = std::move(open);
  return absl::OkStatus();
}

absl::Status PipelineStep::runAction(const PipelineAction &action, Slot &slot,
                                     int64_t step, Environment &env) {
  Device &device = env.device;
  if (absl::Status status = receive(action, slot, device); !status.ok())
    return status;
  env.pointers = slot.pointers;
  device.pointersChanged();
  int32_t stage = action.chunk * program.pipeline.stages + rank;
  for (size_t index : instructionsOf[stage * kActionKinds +
                                     kindIndex(action.kind)]) {
    if (evalRuns && !(*evalRuns)[index])
      continue;
    const Instruction &instruction = program.instructions[index];
    if (env.hooks.beforeInstruction)
      env.hooks.beforeInstruction(index, instruction);
    if (absl::Status status = device.run(index); !status.ok())
      return absl::Status(
          status.code(),
          absl::StrCat("step ", stepNumber(step), ", microbatch ",
                       action.microbatch, ": ", status.message()));
    if (env.hooks.afterInstruction)
      env.hooks.afterInstruction(index, instruction);
  }
  if (action.kind == PipelineAction::Kind::Forward && stage == readLossStage) {
    absl::StatusOr<float> loss = readScalar(device, slot, readLoss);
    if (!loss.ok())
      return loss.status();
    if (!std::isfinite(*loss))
      return absl::InvalidArgumentError(
          atStep(step, absl::StrCat("loss is not finite (", *loss,
                                    ") in microbatch ", action.microbatch)));
    lossSum += *loss;
  }
  if (absl::Status status = send(action, slot, device); !status.ok())
    return status;
  // A stage's gradients are complete once its weight gradients are.
  if (action.kind == PipelineAction::Kind::Backward ||
      action.kind == PipelineAction::Kind::BackwardWeight)
    for (size_t g = 0; g < gradients.size(); ++g) {
      if (gradientStages[g] != stage)
        continue;
      if (absl::Status status = device.accumulate(
              gradientSums[g],
              reinterpret_cast<const float *>(slot.pointers[gradients[g]]),
              program.buffers[gradients[g]].numElements());
          !status.ok())
        return status;
    }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> PipelineStep::run(const int32_t *tokens,
                                             const int32_t *targets,
                                             const int32_t *positions,
                                             int64_t step, Environment env) {
  std::vector<uint8_t *> base = env.pointers;
  trace = env.trace;
  lossSum = 0;
  evalRuns = nullptr;
  if (absl::Status status = reserve(env.device, base); !status.ok())
    return status;
  for (size_t g = 0; g < gradients.size(); ++g)
    if (absl::Status status = env.device.zero(
            gradientSums[g], program.buffers[gradients[g]].numElements());
        !status.ok())
      return status;
  if (absl::Status status =
          runActions(program.pipeline.ranks[rank], {tokens, targets, positions},
                     step, env, base);
      !status.ok())
    return status;
  return optimize(step, env);
}

absl::StatusOr<float>
PipelineStep::evaluate(const int32_t *tokens, const int32_t *targets,
                       const int32_t *positions, int64_t step,
                       const std::vector<bool> &runs, uint32_t lossBuffer,
                       Environment env) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<uint8_t *> base = env.pointers;
  trace = env.trace;
  lossSum = 0;
  evalRuns = &runs;
  readLoss = lossBuffer;
  readLossStage = pipeline.instructionStage[producers[lossBuffer]];
  // Each microbatch through this rank's chunks in model order, microbatch
  // after microbatch: a chunk waits only for lower stages of the same
  // microbatch, which every rank reaches first, and sends never wait.
  std::vector<PipelineAction> actions;
  for (int32_t microbatch = 0; microbatch < pipeline.microbatches; ++microbatch)
    for (int32_t chunk = 0; chunk < pipeline.virtualStages; ++chunk)
      actions.push_back({PipelineAction::Kind::Forward, chunk, microbatch});
  absl::Status status = reserve(env.device, base);
  if (status.ok())
    status = runActions(actions, {tokens, targets, positions}, step, env, base);
  absl::StatusOr<double> loss =
      status.ok() ? meanLossOverStages(step, "evaluation loss") : status;
  evalRuns = nullptr;
  readLoss = program.loss;
  readLossStage = lossStage;
  env.pointers = base;
  env.device.pointersChanged();
  if (!loss.ok())
    return loss.status();
  return static_cast<float>(*loss);
}

absl::StatusOr<double> PipelineStep::meanLossOverStages(int64_t step,
                                                        const char *what) {
  const Pipeline &pipeline = program.pipeline;
  double loss = rank == readLossStage % pipeline.stages
                    ? lossSum / pipeline.microbatches
                    : 0.0;
  if (stageGroup)
    if (absl::Status status =
            comm::sumOverGroup(*stageGroup, absl::MakeSpan(&loss, 1), {});
        !status.ok())
      return atStep(
          step, absl::Status(status.code(), absl::StrCat("sharing the ", what,
                                                         " over the pipeline "
                                                         "stages: ",
                                                         status.message())));
  return loss;
}

bool PipelineStep::travels(size_t transfer) const {
  return !evalRuns || (*evalRuns)[producers[transfers[transfer].buffer]];
}

absl::Status
PipelineStep::runActions(const std::vector<PipelineAction> &actions,
                         const std::vector<const int32_t *> &hostInputs,
                         int64_t step, Environment &env,
                         const std::vector<uint8_t *> &base) {
  const Pipeline &pipeline = program.pipeline;
  slotOf.assign(pipeline.microbatches, nullptr);
  actionsLeft.assign(pipeline.microbatches, 0);
  for (const PipelineAction &action : actions)
    ++actionsLeft[action.microbatch];

  absl::Status failed;
  for (const PipelineAction &action : actions) {
    Slot *slot = slotOf[action.microbatch];
    if (!slot) {
      absl::StatusOr<Slot *> acquired =
          acquire(action.microbatch, env.device, base, hostInputs);
      if (!acquired.ok()) {
        failed = acquired.status();
        break;
      }
      slot = slotOf[action.microbatch] = *acquired;
    }
    if (failed = runAction(action, *slot, step, env); !failed.ok())
      break;
    if (--actionsLeft[action.microbatch] == 0) {
      slot->inUse = false;
      slotOf[action.microbatch] = nullptr;
    }
  }
  if (!failed.ok()) {
    env.pointers = base;
    env.device.pointersChanged();
    for (const std::unique_ptr<Slot> &slot : slots)
      slot->inUse = false;
    return failed;
  }
  if (absl::Status status = finishSends(true); !status.ok())
    return status;
  for (const std::unique_ptr<Slot> &slot : slots)
    slot->inUse = false;
  return absl::OkStatus();
}

absl::StatusOr<StepResult> PipelineStep::optimize(int64_t step,
                                                  Environment &env) {
  const Pipeline &pipeline = program.pipeline;
  Device &device = env.device;
  absl::StatusOr<Slot *> acquired = acquire(-1, device, env.pointers, {});
  if (!acquired.ok())
    return acquired.status();
  Slot &slot = **acquired;
  slot.inUse = false;
  env.pointers = slot.pointers;
  device.pointersChanged();
  // The mean over the microbatches, as one batch of all their rows would
  // give for an average over equally many tokens each.
  float microbatches = static_cast<float>(pipeline.microbatches);
  for (size_t g = 0; g < gradients.size(); ++g)
    if (absl::Status status = device.average(
            reinterpret_cast<float *>(slot.pointers[gradients[g]]),
            gradientSums[g], program.buffers[gradients[g]].numElements(),
            microbatches);
        !status.ok())
      return status;
  absl::StatusOr<double> loss = meanLossOverStages(step, "loss");
  if (!loss.ok())
    return loss.status();

  for (size_t index : optimizerInstructions) {
    const Instruction &instruction = program.instructions[index];
    if (env.hooks.beforeInstruction)
      env.hooks.beforeInstruction(index, instruction);
    if (absl::Status status = device.runOptimizer(index, stageGroup, foreign);
        !status.ok())
      return atStep(step, status);
    if (env.hooks.afterInstruction)
      env.hooks.afterInstruction(index, instruction);
    for (uint32_t result : instruction.results)
      if (result == program.gradNorm) {
        absl::StatusOr<float> norm = readScalar(device, slot, result);
        if (!norm.ok())
          return norm.status();
        if (!std::isfinite(*norm))
          return absl::InvalidArgumentError(atStep(
              step, absl::StrCat("gradient norm is not finite (", *norm, ")")));
      }
  }
  StepResult result;
  result.loss = static_cast<float>(*loss);
  for (auto [buffer, into] :
       {std::make_pair(program.gradNorm, &result.gradNorm),
        std::make_pair(program.lr, &result.lr)}) {
    absl::StatusOr<float> value = readScalar(device, slot, buffer);
    if (!value.ok())
      return value.status();
    *into = *value;
  }
  return result;
}

} // namespace moe::rt::engine
