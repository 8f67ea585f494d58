//===- Executor.h - run a verified training step on the CPU -----*- C++ -*-===//
//
// The executor owns the memory of one rank's training step: persistent
// storage for parameters, optimizer state and the step's inputs, and one
// arena for every temporary (laid out by the compiler's memory plan). A step
// copies the inputs in, runs the program's instructions in order by calling
// the CPU kernels, and reads the loss, gradient norm and learning rate back.
//
// Safety rests on the verifier: an Executor is only built from a program
// that passes verifyProgram (create() checks again), so every index, shape
// and arena range the dispatch uses is known to be in bounds. What the
// verifier cannot know, the values of the step's token ids and targets, is
// checked here, as is a non-finite loss or gradient norm.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_EXECUTOR_H
#define MOE_RUNTIME_ENGINE_EXECUTOR_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace moe::rt {

/// Observers of a step, e.g. to dump gradients before AdamW consumes them.
/// They may read (not resize) any buffer through the Executor.
struct StepHooks {
  /// Called with the instruction's index when its operands are ready.
  std::function<void(size_t index, const Instruction &)> beforeInstruction;
  /// Called once the instruction's results are written.
  std::function<void(size_t index, const Instruction &)> afterInstruction;
};

/// What a step reports: the program's loss, grad norm (before clipping) and
/// learning rate buffers after the last instruction.
struct StepResult {
  float loss = 0.0f;
  float gradNorm = 0.0f;
  float lr = 0.0f;
};

class Executor {
public:
  /// Verifies `program` and allocates its storage (64-byte aligned).
  /// Parameters and optimizer state start at zero until initialize().
  static absl::StatusOr<std::unique_ptr<Executor>> create(Program program);
  static absl::StatusOr<std::unique_ptr<Executor>>
  create(std::shared_ptr<const Program> program);

  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  const Program &program() const { return *prog; }

  /// Sets every parameter from its Init (Normal draws depend on (seed,
  /// name, element index) only, see cpu::initNormal) and zeroes the
  /// optimizer state.
  void initialize(uint64_t seed);
  /// initialize() with the seed recorded in the artifact.
  void initialize() { initialize(prog->seed); }

  /// The storage of an f32 buffer: persistent for parameters, optimizer
  /// state and inputs; inside the arena (valid until the next step
  /// overwrites it) for temporaries. nullptr for an out-of-range index or
  /// an i32 buffer.
  float *data(uint32_t buffer);
  const float *data(uint32_t buffer) const;
  /// The same for i32 buffers (tokens, targets, step, router expert ids).
  int32_t *ids(uint32_t buffer);
  const int32_t *ids(uint32_t buffer) const;

  /// The buffer called `name` among parameters, optimizer state and inputs
  /// (temporaries' names are only for debugging and need not be unique).
  std::optional<uint32_t> findBuffer(std::string_view name) const;
  /// Parameter and optimizer-state buffer indices, in program order.
  const std::vector<uint32_t> &parameters() const { return params; }
  const std::vector<uint32_t> &optimizerStates() const { return states; }

  /// Tokens per step (batch * seq): the length of runStep's inputs.
  int64_t tokensPerStep() const;

  /// Runs one step at 0-based `step`: tokens and targets hold
  /// tokensPerStep() ids each (targets < 0 are ignored by the loss). Errors
  /// name the step, and for bad ids the instruction and the position. A
  /// non-finite loss or gradient norm stops the step as soon as it is
  /// computed, which in a compiled program is before any AdamW update.
  absl::StatusOr<StepResult> runStep(const int32_t *tokens,
                                     const int32_t *targets, int64_t step,
                                     const StepHooks &hooks = {});

  /// Bytes of all parameters / all optimizer state / the temporary arena.
  uint64_t totalParameterBytes() const { return parameterBytes; }
  uint64_t optimizerStateBytes() const { return stateBytes; }
  uint64_t arenaBytes() const { return prog->arenaBytes; }

private:
  struct Storage;
  explicit Executor(std::shared_ptr<const Program> program);
  absl::Status allocate();

  std::shared_ptr<const Program> prog;
  std::unique_ptr<Storage> storage;
  std::vector<uint32_t> params, states;
  uint64_t parameterBytes = 0, stateBytes = 0;
  // The last instructions writing the loss and the grad norm: where a step
  // checks them for non-finite values.
  size_t lossReadyAt = 0, gradNormReadyAt = 0;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_ENGINE_EXECUTOR_H
