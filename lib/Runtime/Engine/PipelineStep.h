//===- PipelineStep.h - run a step over microbatches and stages -*- C++ -*-===//
//
// Private to the executor. A pipelined program (Program.pipeline, version
// 1.2) is the step of one microbatch with every instruction tagged by model
// stage and phase. This rank runs the actions of its pipeline coordinate in
// schedule order; each microbatch in flight has its own copy of the arena
// and of the tokens and targets (a "slot"), taken at its first action and
// given back after its last, so a schedule holding fewer microbatches needs
// fewer slots. A value read on another rank than the one producing it is
// sent when its producing action ends and received when the first action
// reading it starts, over the "pp" group, tagged by transfer and microbatch.
// After the last action the gradients, summed over the microbatches, are
// averaged into one slot where the optimizer instructions run.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_PIPELINESTEP_H
#define MOE_LIB_RUNTIME_ENGINE_PIPELINESTEP_H

#include "AlignedBuffer.h"
#include "Dispatch.h"

#include "moe/Runtime/Engine/Executor.h"
#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace moe::rt::io {
class Trace;
} // namespace moe::rt::io

namespace moe::rt::engine {

/// A value one stage produces and another rank's stage reads.
struct StageTransfer {
  uint32_t buffer = 0;
  int32_t fromStage = 0;
  PipelinePhase fromPhase = PipelinePhase::Forward;
  int32_t toRank = 0;
  /// The (model stage, phase) pairs of toRank that read it.
  std::vector<std::pair<int32_t, PipelinePhase>> readers;
};

/// The bytes pipeline rank `rank` of a verified pipelined program holds:
/// its stages' parameters and optimizer state, the inputs, the sums over
/// the microbatches of what its optimizer reads, and an arena with tokens
/// and targets per microbatch its schedule keeps in flight.
uint64_t pipelineRankBytes(const Program &program, int32_t rank);

/// What the optimizer of pipeline rank `rank` reads of the microbatches,
/// summed over them: the buffers (gradients, or what a deferred reduction
/// reduces once) that a non-optimizer instruction on this rank writes,
/// each with the model stage writing it.
std::vector<std::pair<uint32_t, int32_t>>
optimizerSums(const Program &program, int32_t rank);

/// The transfers of a (verified) pipelined program, in buffer order.
std::vector<StageTransfer> stageTransfers(const Program &program);

class PipelineStep {
public:
  /// The runner of a verified pipelined `program` on pipeline rank `rank`
  /// (this process's "pp" coordinate); `stageGroup` is the group over "pp"
  /// (null with one stage) and must outlive the runner. Fails when the
  /// stage-to-stage messages of a step need more tags than there are.
  static absl::StatusOr<std::unique_ptr<PipelineStep>>
  create(const Program &program, int32_t rank, comm::Group *stageGroup);

  ~PipelineStep();

  /// What a step borrows from the executor: its context for the step (the
  /// trace and expert settings included), whose pointers are `pointers`:
  /// persistent buffers fixed (null for other stages' weights), while
  /// temporaries, tokens and targets are pointed at the running slot's, and
  /// on return at the slot the optimizer ran in, so that outputs and
  /// gradients read as after a plain step.
  struct Environment {
    const StepContext &context;
    std::vector<uint8_t *> &pointers;
    const StepHooks &hooks;
  };
  /// Runs the step: `tokens` and `targets` hold this rank's rows of every
  /// microbatch, microbatch after microbatch.
  absl::StatusOr<StepResult> run(const int32_t *tokens, const int32_t *targets,
                                 int64_t step, Environment env);

  /// Whether this rank holds buffer `b` (parameters and optimizer state of
  /// its own stages; everything else is per slot or shared).
  bool holds(uint32_t b) const { return held[b]; }

  /// Allocates the slots of the microbatches the schedule holds at once on
  /// this rank (at least one, for the optimizer), so that a step does not
  /// run out of memory halfway. `base` are the executor's addresses.
  absl::Status reserve(const std::vector<uint8_t *> &base);

  /// Slots allocated (microbatches in flight at the peak).
  size_t slotsAllocated() const { return slots.size(); }

private:
  struct Slot;
  PipelineStep(const Program &program, int32_t rank, comm::Group *stageGroup);
  absl::StatusOr<Slot *> acquire(int32_t microbatch,
                                 const std::vector<uint8_t *> &base,
                                 const int32_t *tokens,
                                 const int32_t *targets);
  absl::Status runAction(const PipelineAction &action, Slot &slot,
                         int64_t step, Environment &env);
  absl::Status receive(const PipelineAction &action, Slot &slot);
  absl::Status send(const PipelineAction &action, Slot &slot);
  absl::Status finishSends(bool all);
  absl::StatusOr<StepResult> optimize(int64_t step, Environment &env);

  const Program &program;
  int32_t rank;
  comm::Group *stageGroup;
  std::vector<bool> held;
  std::vector<StageTransfer> transfers;
  /// Instructions per (model stage, phase), in program order.
  std::vector<std::vector<size_t>> instructionsOf;
  std::vector<size_t> optimizerInstructions;
  /// Gradient buffers of this rank's stages, with their running sums.
  std::vector<uint32_t> gradients;
  std::vector<std::vector<float>> gradientSums;
  std::vector<int32_t> gradientStages; // the stage producing each
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<Slot *> slotOf; // by microbatch, while in flight
  std::vector<int32_t> actionsLeft; // by microbatch
  struct PendingSend;
  std::vector<std::unique_ptr<PendingSend>> pendingSends;
  int32_t lossStage = 0;
  double lossSum = 0;
  io::Trace *trace = nullptr; // the running step's

};

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_PIPELINESTEP_H
