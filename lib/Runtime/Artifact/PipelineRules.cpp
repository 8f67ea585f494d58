//===- PipelineRules.cpp - checks of microbatches and pipeline stages -----===//
//
// A pipelined program (version 1.2) runs its instructions out of program
// order: per microbatch, per model stage, per phase, on the rank of the
// stage, as its schedule says. These checks make sure that order computes
// what program order would: every value is produced by an action that the
// schedule runs before the action reading it (on another rank, it is sent
// there), the optimizer reads nothing of one microbatch but the gradients it
// averages, and every parameter lives on the stages that update it (one,
// or two that sum their halves of its gradient). The schedule
// itself must be well formed and free of deadlock, which the pipeline
// library's simulator decides.
//
//===----------------------------------------------------------------------===//

#include "VerifierSupport.h"

#include "moe/Runtime/PipelineOrder.h"

#include "absl/strings/str_join.h"

#include <algorithm>
#include <map>
#include <optional>

namespace moe::rt::verifier {
namespace {

// Large enough for any real job; small enough that per-stage tables and
// per-microbatch tags stay cheap.
constexpr int32_t kMaxPipelineStages = 1024;
constexpr int32_t kMaxMicrobatches = 4096;

absl::Status pipelineError(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("pipeline: ", message));
}

const char *phaseName(PipelinePhase phase) {
  switch (phase) {
  case PipelinePhase::Forward:
    return "forward";
  case PipelinePhase::Backward:
    return "backward";
  case PipelinePhase::BackwardWeight:
    return "weight-gradient";
  case PipelinePhase::Optimizer:
    return "optimizer";
  }
  return "unknown";
}

absl::Status verifyShape(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  if (pipeline.stages < 1 || pipeline.stages > kMaxPipelineStages ||
      pipeline.virtualStages < 1 ||
      pipeline.virtualStages > kMaxPipelineStages ||
      pipeline.microbatches > kMaxMicrobatches)
    return pipelineError(absl::StrCat(
        pipeline.stages, " stages x ", pipeline.virtualStages,
        " virtual stages and ", pipeline.microbatches,
        " microbatches: expected 1..", kMaxPipelineStages, " stages and ",
        "virtual stages and 1..", kMaxMicrobatches, " microbatches"));
  if (pipeline.modelStages() > kMaxPipelineStages)
    return pipelineError(absl::StrCat(pipeline.modelStages(),
                                      " model stages, expected at most ",
                                      kMaxPipelineStages));
  // The stages are the outermost mesh axis, and nothing but the runtime's
  // stage-to-stage transfers runs over it.
  bool hasAxis = !program.meshAxes.empty() && program.meshAxes[0] == "pp";
  if (pipeline.stages > 1 &&
      (!hasAxis || program.meshShape[0] != pipeline.stages))
    return pipelineError(absl::StrCat(
        pipeline.stages, " stages need mesh axis 0 to be 'pp' of size ",
        pipeline.stages, ", the mesh is ", program.meshDescription()));
  if (pipeline.stages == 1 && hasAxis)
    return pipelineError("a mesh axis 'pp' without pipeline stages");
  auto namesPp = [](const AxisList &axes) {
    return std::find(axes.begin(), axes.end(), "pp") != axes.end();
  };
  for (size_t g = 0; g < program.groups.size(); ++g)
    if (namesPp(program.groups[g]))
      return pipelineError(absl::StrCat(
          "group ", g, " spans 'pp': collectives do not cross stages"));
  if (namesPp(program.batchAxes))
    return pipelineError("the batch is split over 'pp'");
  for (uint32_t b = 0; b < program.buffers.size(); ++b)
    for (const AxisList &axes : program.buffers[b].split)
      if (namesPp(axes))
        return bufferError(program, b, "is split over 'pp'");

  size_t n = program.instructions.size();
  if (pipeline.instructionStage.size() != n ||
      pipeline.instructionPhase.size() != n)
    return pipelineError(absl::StrCat(
        pipeline.instructionStage.size(), " stages and ",
        pipeline.instructionPhase.size(), " phases for ", n, " instructions"));
  for (size_t i = 0; i < n; ++i) {
    int32_t stage = pipeline.instructionStage[i];
    PipelinePhase phase = pipeline.instructionPhase[i];
    if (static_cast<int>(phase) > static_cast<int>(PipelinePhase::Optimizer))
      return instructionError(
          program, i,
          absl::StrCat("pipeline phase ", static_cast<int>(phase),
                       " is not one the schema defines"));
    Opcode opcode = program.instructions[i].opcode;
    bool adamw = isAdamW(opcode);
    bool gradientSum = opcode == Opcode::PipelineGradientSum;
    bool optimizer = phase == PipelinePhase::Optimizer;
    if (adamw && !optimizer)
      return instructionError(program, i,
                              "AdamW outside the optimizer phase would "
                              "update once per microbatch");
    if (gradientSum && !optimizer)
      return instructionError(program, i,
                              "PipelineGradientSum outside the optimizer "
                              "phase would exchange every microbatch");
    // Optimizer instructions of stage -1 run on every stage; the others
    // (AdamW, gradient sums, reductions of summed gradients) on their own.
    int32_t low = optimizer && !adamw && !gradientSum ? -1 : 0;
    int32_t high = pipeline.modelStages() - 1;
    if (stage < low || stage > high)
      return instructionError(
          program, i,
          absl::StrCat("pipeline stage ", stage, " of a ", phaseName(phase),
                       " instruction, expected ",
                       low == high ? absl::StrCat(low)
                                   : absl::StrCat(low, "..", high)));
  }
  return absl::OkStatus();
}

/// Well formed and deadlock free, by the pipeline library's own checks.
absl::Status verifySchedule(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  if (pipeline.ranks.size() != static_cast<size_t>(pipeline.stages))
    return pipelineError(absl::StrCat("a schedule for ", pipeline.ranks.size(),
                                      " ranks, expected ", pipeline.stages));
  pipeline::Schedule schedule;
  bool known = false;
  for (pipeline::ScheduleKind kind :
       {pipeline::ScheduleKind::GPipe, pipeline::ScheduleKind::OneFOneB,
        pipeline::ScheduleKind::Interleaved1F1B,
        pipeline::ScheduleKind::ZeroBubble})
    if (pipeline.schedule == pipeline::toString(kind)) {
      schedule.kind = kind;
      known = true;
    }
  if (!known)
    return pipelineError(
        absl::StrCat("unknown schedule '", pipeline.schedule, "'"));
  schedule.stages = pipeline.stages;
  schedule.virtualStages = pipeline.virtualStages;
  schedule.microbatches = pipeline.microbatches;
  schedule.ranks.resize(pipeline.stages);
  for (int32_t r = 0; r < pipeline.stages; ++r)
    for (const PipelineAction &action : pipeline.ranks[r]) {
      if (static_cast<int>(action.kind) >
          static_cast<int>(PipelineAction::Kind::Backward))
        return pipelineError(
            absl::StrCat("rank ", r, ": action kind ",
                         static_cast<int>(action.kind),
                         " is not one the schema defines"));
      schedule.ranks[r].push_back(
          {toSchedule(action.kind), r, action.chunk, action.microbatch});
    }
  if (std::optional<std::string> error = pipeline::verifySchedule(schedule))
    return pipelineError(absl::StrCat("schedule: ", *error));
  pipeline::ScheduleOptions options;
  options.stages = pipeline.stages;
  options.virtualStages = pipeline.virtualStages;
  options.microbatches = pipeline.microbatches;
  pipeline::ErrorOr<pipeline::Timeline> timeline =
      pipeline::simulate(schedule, options);
  if (!timeline)
    return pipelineError(absl::StrCat("schedule: ", timeline.getError()));
  return absl::OkStatus();
}

absl::Status verifyDataflowOrder(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<int64_t> producer = program.lastWriters();
  // Gradients: what the optimizer averages over the microbatches, each from
  // the stage holding its parameter (persistentBufferStages).
  std::map<uint32_t, int32_t> gradientStage;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    if (isAdamW(inst.opcode))
      gradientStage[inst.operands[1]] = pipeline.instructionStage[i];
  }
  std::vector<std::vector<int32_t>> parameterStages =
      persistentBufferStages(program);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    int32_t stage = pipeline.instructionStage[i];
    PipelinePhase phase = pipeline.instructionPhase[i];
    bool optimizer = phase == PipelinePhase::Optimizer;
    for (size_t o = 0; o < inst.operands.size(); ++o) {
      uint32_t b = inst.operands[o];
      const Buffer &buffer = program.buffers[b];
      // Persistent state lives on the stage that updates it (a parameter
      // on the one reading it); a rank holds only its own stages'.
      bool stageBound = buffer.kind == BufferKind::Parameter ||
                        buffer.kind == BufferKind::OptimizerState ||
                        buffer.kind == BufferKind::WorkingCopy;
      const std::vector<int32_t> &holders = parameterStages[b];
      if (stageBound && (!optimizer || stage >= 0) &&
          std::find(holders.begin(), holders.end(), stage) == holders.end())
        return instructionError(
            program, i,
            holders.empty()
                ? absl::StrCat("reads ", describeBuffer(program, b),
                               " on pipeline stage ", stage,
                               ", but no stage holds it (nothing updates it)")
                : absl::StrCat("reads ", describeBuffer(program, b),
                               " on pipeline stage ", stage,
                               ", but it lives on stage",
                               holders.size() > 1 ? "s " : " ",
                               absl::StrJoin(holders, " and ")));
      if (buffer.kind != BufferKind::Temporary || producer[b] < 0)
        continue;
      size_t p = static_cast<size_t>(producer[b]);
      int32_t fromStage = pipeline.instructionStage[p];
      PipelinePhase from = pipeline.instructionPhase[p];
      if (optimizer) {
        // The optimizer of one stage reads that stage's values, summed over
        // the microbatches when they are theirs; what every stage runs
        // reads the gradients of its own only (the others skip them).
        bool gradient = gradientStage.count(b) != 0;
        bool ownStage = fromStage < 0 || fromStage == stage ||
                        (stage < 0 && gradient);
        // The half of a shared parameter's gradient that the other stage
        // sends (verifyGradientSums checks the pair).
        bool peerHalf = inst.opcode == Opcode::PipelineGradientSum &&
                        peerGradientHalf(program, i).first == o;
        if (from == PipelinePhase::Forward || (!ownStage && !peerHalf))
          return instructionError(
              program, i,
              absl::StrCat("the optimizer of stage ", stage, " reads ",
                           describeBuffer(program, b), " of the ",
                           phaseName(from), " of stage ", fromStage));
        continue;
      }
      if (!pipeline::runsBefore(fromStage, toSchedule(from), stage,
                                 toSchedule(phase)))
        return instructionError(
            program, i,
            absl::StrCat("the ", phaseName(phase), " of stage ", stage,
                         " reads ", describeBuffer(program, b),
                         " from the ", phaseName(from), " of stage ",
                         fromStage, ", which the schedule runs later"));
    }
  }
  // Every AdamW runs only where its parameter lives; a parameter read by a
  // stage must be updated on that stage (checked above), and the step's
  // reported values come from where the runtime reads them.
  int64_t loss = producer[program.loss];
  if (loss < 0 ||
      pipeline.instructionPhase[loss] != PipelinePhase::Forward)
    return pipelineError("the loss is not computed by a forward pass");
  for (uint32_t b : {program.gradNorm, program.lr}) {
    int64_t p = producer[b];
    if (p < 0 || pipeline.instructionStage[p] != -1)
      return bufferError(program, b,
                         "is reported by every rank, so every stage must "
                         "compute it in the optimizer phase");
  }
  return absl::OkStatus();
}

/// A PipelineGradientSum adds its stage's half of a shared parameter's
/// gradient to the half another rank's stage computes, which that stage
/// sends while it receives this one: so the other stage runs the same sum,
/// and the two are next to each other in program order, so that any two
/// ranks exchange their halves in the same order.
absl::Status verifyGradientSums(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<size_t> sums;
  for (size_t i = 0; i < program.instructions.size(); ++i)
    if (program.instructions[i].opcode == Opcode::PipelineGradientSum)
      sums.push_back(i);
  for (size_t k = 0; k < sums.size(); ++k) {
    size_t i = sums[k];
    const Instruction &inst = program.instructions[i];
    int32_t stage = pipeline.instructionStage[i];
    int32_t peerStage = peerGradientHalf(program, i).second;
    if (peerStage == stage)
      return instructionError(
          program, i,
          absl::StrCat("sums two gradient halves that stage ", stage,
                       " computes both of: expected one from another stage"));
    if (peerStage < 0 || peerStage % pipeline.stages == stage % pipeline.stages)
      return instructionError(
          program, i,
          absl::StrCat("receives a gradient half from stage ", peerStage,
                       ", expected a stage on another pipeline rank than "
                       "stage ",
                       stage, "'s"));
    auto partners = [&](size_t j) {
      return program.instructions[j].operands == inst.operands &&
             pipeline.instructionStage[j] == peerStage &&
             peerGradientHalf(program, j).second == stage;
    };
    bool paired = (k > 0 && partners(sums[k - 1])) ||
                  (k + 1 < sums.size() && partners(sums[k + 1]));
    if (!paired)
      return instructionError(
          program, i,
          absl::StrCat("has no PipelineGradientSum of the same halves on "
                       "stage ",
                       peerStage,
                       " next to it, which would send the half "
                       "this stage waits for"));
  }
  return absl::OkStatus();
}

/// The arena plan is made for program order; a rank keeps to it within a
/// microbatch when it runs the instructions of its stages in an order that
/// is a subsequence of program order, with the optimizer's after all.
absl::Status verifyProgramOrder(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  size_t n = program.instructions.size();
  bool optimizerSeen = false;
  for (size_t i = 0; i < n; ++i) {
    bool optimizer = pipeline.instructionPhase[i] == PipelinePhase::Optimizer;
    if (optimizerSeen && !optimizer)
      return instructionError(program, i,
                              "a microbatch instruction after the optimizer's");
    optimizerSeen |= optimizer;
  }
  for (int32_t r = 0; r < pipeline.stages; ++r) {
    // Each microbatch's actions on this rank, in the order the rank runs them.
    std::vector<std::vector<PipelineAction>> byMicrobatch(
        pipeline.microbatches);
    for (const PipelineAction &action : pipeline.ranks[r])
      byMicrobatch[action.microbatch].push_back(action);
    for (int32_t j = 0; j < pipeline.microbatches; ++j) {
      size_t last = 0;
      for (size_t i = 0; i < n; ++i) {
        int32_t stage = pipeline.instructionStage[i];
        PipelinePhase phase = pipeline.instructionPhase[i];
        if (phase == PipelinePhase::Optimizer || stage % pipeline.stages != r)
          continue;
        const std::vector<PipelineAction> &actions = byMicrobatch[j];
        size_t position = 0;
        while (position < actions.size() &&
               !(actions[position].chunk * pipeline.stages + r == stage &&
                 actionRuns(actions[position].kind, phase)))
          ++position;
        if (position == actions.size())
          return instructionError(
              program, i,
              absl::StrCat("no action of rank ", r, " runs the ",
                           phaseName(phase), " of stage ", stage,
                           " for microbatch ", j));
        if (position < last)
          return instructionError(
              program, i,
              absl::StrCat("rank ", r, " runs it before instructions that "
                           "precede it (microbatch ", j,
                           "), against the arena plan's program order"));
        last = position;
      }
    }
  }
  return absl::OkStatus();
}

} // namespace

std::vector<std::vector<bool>> pipelineRanksHolding(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  size_t ranks = pipeline.enabled() ? pipeline.stages : 1;
  if (!pipeline.enabled())
    return std::vector<std::vector<bool>>(program.buffers.size(),
                                          std::vector<bool>(ranks, true));
  std::vector<std::vector<bool>> holding(program.buffers.size(),
                                         std::vector<bool>(ranks, false));
  auto mark = [&](uint32_t b, int32_t stage) {
    if (stage < 0)
      holding[b].assign(ranks, true);
    else
      holding[b][stage % pipeline.stages] = true;
  };
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    int32_t stage = pipeline.instructionStage[i];
    for (uint32_t b : inst.results)
      mark(b, stage);
    // The global norm skips other stages' gradients, and a gradient sum
    // receives the other stage's half into memory of its own.
    std::optional<size_t> peer;
    if (inst.opcode == Opcode::PipelineGradientSum)
      peer = peerGradientHalf(program, i).first;
    if (inst.opcode != Opcode::GlobalNorm)
      for (size_t o = 0; o < inst.operands.size(); ++o)
        if (o != peer)
          mark(inst.operands[o], stage);
  }
  return holding;
}

absl::Status verifyPipeline(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  if (!pipeline.enabled()) {
    if (pipeline.stages != 1 || pipeline.virtualStages != 1 ||
        !pipeline.instructionStage.empty() ||
        !pipeline.instructionPhase.empty() || !pipeline.ranks.empty())
      return pipelineError("stages or a schedule without microbatches");
    if (!program.meshAxes.empty() && program.meshAxes[0] == "pp")
      return pipelineError("a mesh axis 'pp' without pipeline stages");
    return absl::OkStatus();
  }
  MOE_VERIFY_OK(verifyShape(program));
  MOE_VERIFY_OK(verifySchedule(program));
  MOE_VERIFY_OK(verifyProgramOrder(program));
  MOE_VERIFY_OK(verifyGradientSums(program));
  return verifyDataflowOrder(program);
}

} // namespace moe::rt::verifier

namespace moe::rt {

std::vector<std::vector<int32_t>>
persistentBufferStages(const Program &program) {
  const Pipeline &pipeline = program.pipeline;
  std::vector<std::vector<int32_t>> stages(program.buffers.size());
  auto add = [&](uint32_t b, int32_t stage) {
    if (std::find(stages[b].begin(), stages[b].end(), stage) == stages[b].end())
      stages[b].push_back(stage);
  };
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    int32_t stage = pipeline.instructionStage[i];
    if (isAdamW(inst.opcode)) {
      for (size_t o : {0, 2, 3})
        add(inst.operands[o], stage);
      // The BF16 working copy lives with the master it is rounded from.
      if (inst.operands.size() > 7)
        add(inst.operands[7], stage);
    }
    // An amax history, a load counter and a router's bias live with the
    // update that moves them.
    if (inst.opcode == Opcode::Fp8AmaxUpdate ||
        inst.opcode == Opcode::ExpertLoadUpdate)
      for (uint32_t b : inst.operands)
        add(b, stage);
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    if (pipeline.instructionPhase[i] == PipelinePhase::Optimizer)
      continue;
    for (uint32_t b : program.instructions[i].operands)
      if ((program.buffers[b].kind == BufferKind::Parameter ||
           program.buffers[b].kind == BufferKind::WorkingCopy) &&
          stages[b].empty())
        stages[b].push_back(pipeline.instructionStage[i]);
  }
  return stages;
}

std::pair<size_t, int32_t> peerGradientHalf(const Program &program,
                                            size_t index) {
  const Pipeline &pipeline = program.pipeline;
  const Instruction &inst = program.instructions[index];
  int32_t own = pipeline.instructionStage[index];
  for (size_t o = 0; o < 2; ++o)
    for (size_t p = index; p-- > 0;) {
      const std::vector<uint32_t> &results = program.instructions[p].results;
      if (std::find(results.begin(), results.end(), inst.operands[o]) ==
          results.end())
        continue;
      if (pipeline.instructionStage[p] != own)
        return {o, pipeline.instructionStage[p]};
      break;
    }
  return {1, own};
}

} // namespace moe::rt
