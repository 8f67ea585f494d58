//===- PipelineOrder.h - a program's pipeline enums as the schedule's -*- C++ -*-===//
//
// The artifact keeps its own copies of the pipeline library's action kinds
// and phases (the format owns its encoding); they are numbered alike, so
// the runtime asks the library's rules (actionRuns, runsBefore) through
// these casts.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_PIPELINEORDER_H
#define MOE_RUNTIME_PIPELINEORDER_H

#include "moe/Pipeline/Schedule.h"
#include "moe/Runtime/Program.h"

#include <vector>

namespace moe::rt {

static_assert(static_cast<int>(PipelineAction::Kind::Forward) ==
                  static_cast<int>(pipeline::ActionKind::Forward) &&
              static_cast<int>(PipelineAction::Kind::BackwardInput) ==
                  static_cast<int>(pipeline::ActionKind::BackwardInput) &&
              static_cast<int>(PipelineAction::Kind::BackwardWeight) ==
                  static_cast<int>(pipeline::ActionKind::BackwardWeight) &&
              static_cast<int>(PipelineAction::Kind::Backward) ==
                  static_cast<int>(pipeline::ActionKind::Backward));
static_assert(static_cast<int>(PipelinePhase::Forward) ==
                  static_cast<int>(pipeline::Phase::Forward) &&
              static_cast<int>(PipelinePhase::Backward) ==
                  static_cast<int>(pipeline::Phase::Backward) &&
              static_cast<int>(PipelinePhase::BackwardWeight) ==
                  static_cast<int>(pipeline::Phase::BackwardWeight) &&
              static_cast<int>(PipelinePhase::Optimizer) ==
                  static_cast<int>(pipeline::Phase::Optimizer));

/// Valid for the values the schema defines (the verifier checks them).
inline pipeline::ActionKind toSchedule(PipelineAction::Kind kind) {
  return static_cast<pipeline::ActionKind>(kind);
}
inline pipeline::Phase toSchedule(PipelinePhase phase) {
  return static_cast<pipeline::Phase>(phase);
}

/// Whether an action of `kind` runs instructions of `phase`.
inline bool actionRuns(PipelineAction::Kind kind, PipelinePhase phase) {
  return pipeline::actionRuns(toSchedule(kind), toSchedule(phase));
}

/// The model stages holding each parameter and optimizer state of a
/// pipelined program whose stage tags are in range: those of its AdamWs
/// (or its Fp8AmaxUpdate's), or, for a parameter nothing updates, that of
/// the first microbatch instruction reading it; none for the other buffers
/// and for what no stage touches. One stage but for a parameter two stages
/// share (tied embeddings), which each stage updates with the gradient
/// they sum (PipelineGradientSum). The verifier requires every reader to
/// be on one of them; the runtime keeps the buffer on their ranks only.
std::vector<std::vector<int32_t>>
persistentBufferStages(const Program &program);

/// The operand of PipelineGradientSum `index` that another stage computes
/// (0 or 1), and that stage: the half this stage receives. Valid for a
/// verified program.
std::pair<size_t, int32_t> peerGradientHalf(const Program &program,
                                            size_t index);

} // namespace moe::rt

#endif // MOE_RUNTIME_PIPELINEORDER_H
