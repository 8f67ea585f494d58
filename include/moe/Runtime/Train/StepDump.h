//===- StepDump.h - record one training step for the reference -*- C++ -*-===//
//
// A step dump is a directory with everything an independent implementation
// needs to recompute one step and compare (test/reference/
// mixtral_reference.py): config.json, batch.safetensors, params and
// optimizer state before and after, the gradients before clipping and
// metrics.json.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_STEPDUMP_H
#define MOE_RUNTIME_TRAIN_STEPDUMP_H

#include "moe/Runtime/Backend/Backend.h"
#include "moe/Runtime/Engine/Executor.h"

#include "absl/status/status.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe::rt::train {

/// What a dump and a probe read a step's state through: a backend's
/// buffers (readBuffer: a device's are copied back, waiting for its
/// stream) and its host weights (pulled from the device first), or a host
/// executor's memory. Holds references: the source outlives it.
class StepState {
public:
  StepState(Backend &backend);   // NOLINT: either source converts
  StepState(const Executor &executor); // NOLINT
  const Program &program() const { return *prog; }
  /// Buffer `buffer`'s values widened to fp32 (an f32 or a bf16 buffer).
  absl::StatusOr<std::vector<float>> values(uint32_t buffer) const;
  /// The weights as they are now.
  absl::StatusOr<const WeightStore *> weights() const;

private:
  const Program *prog;
  std::function<absl::Status(uint32_t, void *)> read;
  std::function<absl::StatusOr<const WeightStore *>()> current;
};

/// The losses a step reports besides the total: the cross-entropy and the
/// means over the MoE layers of each router loss (unscaled, as
/// Megatron-Core logs them), with whether the model has each.
struct LossParts {
  float ce = 0, aux = 0, sequenceAux = 0, zLoss = 0;
  bool hasSequenceAux = false, hasZLoss = false;
  bool known = false;
};

/// Captures the parts of the loss while a step runs, from the operands of
/// the instruction that writes the loss. This assumes the layout moec
/// writes, loss = WeightedSum(ce, router losses...); the parts stay unknown
/// unless the loss is such a WeightedSum whose operand 0 comes from a
/// CrossEntropy (or the fused LinearCrossEntropy) and every other operand
/// from an AuxLoss, a SequenceAuxLoss or a ZLoss.
class LossPartsProbe {
public:
  explicit LossPartsProbe(StepState state);
  /// To be called from StepHooks::beforeInstruction: the runtime may run
  /// WeightedSum in place, so its operands are only intact before it runs.
  /// A step over microbatches reaches it once per microbatch (on the rank
  /// computing the loss); the parts are their means.
  void before(size_t index);
  const LossParts &parts() const { return result; }

private:
  /// What each operand of the loss instruction is.
  enum class Term { CrossEntropy, Aux, SequenceAux, ZLoss };

  StepState state;
  std::optional<size_t> lossInstruction;
  std::vector<Term> terms;
  LossParts result;
  double sums[4] = {0, 0, 0, 0};
  int64_t count = 0;
};

class StepDump {
public:
  /// Prepares `dir` (created if needed) and writes the state before the step.
  static absl::StatusOr<StepDump> begin(const std::string &dir,
                                        StepState state, int64_t step,
                                        const int32_t *tokens,
                                        const int32_t *targets);
  /// To be called from StepHooks::beforeInstruction: keeps each gradient
  /// as AdamW is about to consume it. A gradient that cannot be read fails
  /// finish().
  void before(size_t index, const Instruction &inst);
  /// Writes the state after the step and its metrics.
  absl::Status finish(float loss, float gradNorm, float lr,
                      const LossParts &parts);

private:
  StepDump(std::string dir, StepState state)
      : dir(std::move(dir)), state(std::move(state)) {}
  std::string dir;
  StepState state;
  absl::Status readFailure;
  /// (parameter buffer, copy of its gradient), in update order.
  std::vector<std::pair<uint32_t, std::vector<float>>> grads;
};

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_STEPDUMP_H
