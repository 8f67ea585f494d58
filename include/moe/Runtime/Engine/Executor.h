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
// A partitioned program (a mesh of N > 1 ranks) runs on every rank of an
// N-rank comm::World: each rank holds its blocks of the split parameters and
// optimizer state and its rows of the batch, and the program's collectives
// and grouped reductions run on one comm::Group per program group.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_EXECUTOR_H
#define MOE_RUNTIME_ENGINE_EXECUTOR_H

#include "moe/Runtime/Backend/WeightStore.h"
#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::rt {

namespace comm {
class Group;
class World;
} // namespace comm

namespace io {
class Trace;
} // namespace io

namespace engine {
class AsyncCollectives;
class Placement;
class PipelineStep;
class HostPipelineDevice;
struct LossSlice;
struct StepContext;
} // namespace engine

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

/// Steps are 0-based indices in the code (the LR schedule, the batches
/// drawn, --start-step); messages, progress lines and the metrics number
/// them as people count, from 1: index `step` is step stepNumber(step).
inline int64_t stepNumber(int64_t step) { return step + 1; }

/// "step N: " and `message`, N = stepNumber(step): how every error of a
/// step begins.
std::string atStep(int64_t step, absl::string_view message);

/// `status` with its message prefixed by atStep().
absl::Status atStep(int64_t step, const absl::Status &status);

/// What every backend's runStep checks first: tokens and targets given
/// (and positions, for a program with document masking), and a step the
/// artifact's int32 step counter holds.
absl::Status checkStepInputs(const Program &program, const int32_t *tokens,
                             const int32_t *targets, const int32_t *positions,
                             int64_t step);

/// Which rows of the global batch one rank's tokens and targets are: block
/// `index` of `count` equal blocks of rows.
struct BatchBlock {
  int64_t index = 0;
  int64_t count = 1;
};

class Executor final : public WeightStore {
public:
  /// Verifies `program` and allocates its storage (64-byte aligned).
  /// Parameters and optimizer state start at zero until initialize().
  ///
  /// A program over N > 1 ranks needs a `world` of exactly N ranks; this
  /// process is rank world->rank() of the mesh. Creating the executor then
  /// creates the program's groups, a collective call: every rank must
  /// create its executor. `world` must outlive the executor. A one-rank
  /// program needs no world (its groups, if any, are groups of one), and is
  /// refused with a world of more ranks.
  static absl::StatusOr<std::unique_ptr<Executor>>
  create(Program program, comm::World *world = nullptr);
  static absl::StatusOr<std::unique_ptr<Executor>>
  create(std::shared_ptr<const Program> program, comm::World *world = nullptr);

  /// The most memory one rank of a verified `program` allocates:
  /// persistent buffers and the arena, and for a pipelined program those of
  /// its busiest pipeline rank (its stages' weights, an arena per
  /// microbatch in flight).
  static uint64_t bytesPerRank(const Program &program);

  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  const Program &program() const override { return *prog; }

  /// This rank in the program's mesh (0 without one), its coordinates (one
  /// per mesh axis) and the mesh's number of ranks.
  int64_t rank() const override;
  const std::vector<int64_t> &coordinates() const;
  int64_t numRanks() const { return prog->numRanks(); }

  /// The rows of the global batch this rank trains on (Program.batchAxes).
  BatchBlock batchBlock() const;

  /// The shape of the whole tensor a buffer holds (a block of, when split).
  std::vector<int64_t> globalShape(uint32_t buffer) const override;
  /// This rank's place in the mesh (which block of each split buffer).
  const engine::Placement &placementOf() const override {
    return *placement;
  }

  /// Sets every parameter from its Init and zeroes the optimizer state
  /// (engine::initializeWeights).
  void initialize(uint64_t seed);
  /// initialize() with the seed recorded in the artifact.
  void initialize() { initialize(prog->seed); }
  /// Mixed precision: rounds every master weight to nearest even into its
  /// BF16 working copy. Working copies are never initialised, loaded or
  /// saved: runStep() derives them before a step whenever a master's
  /// storage was handed out for writing (data() or bytes() on a non-const
  /// executor) since, so a step after initialize(), a load or a resume
  /// reads the masters' current values. A pointer kept from an earlier
  /// call and written later is not seen: call this after writing through
  /// it. Under ZeRO-1 a master is this rank's block and its copy whole:
  /// the copy's group gathers the rounded blocks, which may fail.
  absl::Status refreshWorkingCopies();

  /// The storage of an f32 buffer: persistent for parameters, optimizer
  /// state and inputs; inside the arena (valid until the next step
  /// overwrites it) for temporaries. nullptr for an out-of-range index or
  /// an i32 buffer.
  float *data(uint32_t buffer) override;
  const float *data(uint32_t buffer) const override;
  /// The same for i32 buffers (tokens, targets, step, router expert ids).
  int32_t *ids(uint32_t buffer);
  const int32_t *ids(uint32_t buffer) const;
  /// The storage of a buffer of any dtype (bf16 buffers hold their bits),
  /// sizeInBytes() long; nullptr for an out-of-range index.
  uint8_t *bytes(uint32_t buffer);
  const uint8_t *bytes(uint32_t buffer) const;

  /// The buffer called `name` among parameters, optimizer state and inputs
  /// (temporaries' names are only for debugging and need not be unique).
  std::optional<uint32_t> findBuffer(std::string_view name) const;
  /// Parameter and optimizer-state buffer indices, in program order.
  const std::vector<uint32_t> &parameters() const override { return params; }
  const std::vector<uint32_t> &optimizerStates() const override {
    return states;
  }

  /// This rank's tokens per step (batch * seq, times the microbatches of a
  /// pipelined program, microbatch after microbatch): the length of
  /// runStep's inputs.
  int64_t tokensPerStep() const;
  /// The microbatches a step accumulates gradients over (1 for a plain
  /// program).
  int64_t microbatches() const;

  /// Runs one step at 0-based `step`: tokens and targets hold
  /// tokensPerStep() ids each (targets < 0 are ignored by the loss). Errors
  /// name the step (atStep), and for bad ids the instruction and the position.
  /// A non-finite loss or gradient norm stops the step as soon as it is
  /// computed, which in a compiled program is before any AdamW update.
  /// With document masking, `positions` holds each token's position in its
  /// document, as many ids.
  absl::StatusOr<StepResult> runStep(const int32_t *tokens,
                                     const int32_t *targets, int64_t step,
                                     const StepHooks &hooks = {},
                                     const int32_t *positions = nullptr);

  /// The loss of one batch, changing nothing: the instructions of the step
  /// that the loss depends on (engine::LossSlice: the forward pass, with
  /// its collectives; for a pipelined program, forward actions only), after
  /// which the state they touch is put back. Inputs as runStep's; `step`
  /// names the step in errors. A collective call of every rank.
  absl::StatusOr<float> evaluate(const int32_t *tokens, const int32_t *targets,
                                 int64_t step,
                                 const int32_t *positions = nullptr);

  /// Records every later step's kernels and communication into `trace`
  /// (null: stop); it must outlive the steps.
  void setTrace(io::Trace *trace) { traceTo = trace; }

  /// Splits the tokens of every expert-parallel instruction into `chunks`
  /// and, where MPI lets a second thread call it, moves chunk i + 1 while
  /// chunk i computes (1: one exchange each way, no thread).
  void setExpertChunks(int64_t chunks) { expertChunks = chunks; }

  /// Runs gradient reductions and parameter all-gathers on a communication
  /// thread while the step goes on (see lib/Runtime/Engine/
  /// AsyncCollectives.h): no change in the numbers. Only for a program that
  /// is partitioned and not pipelined, where MPI lets a second thread call
  /// it; returns whether it is on.
  bool setAsyncCollectives(bool on);

  /// Replaces each of `values` by its sum over the pipeline stages (exact,
  /// in stage order); nothing to do without stages. A collective call of
  /// the ranks of one "pp" group, e.g. to report on every rank what the
  /// last stage computed.
  absl::Status sumOverStages(absl::Span<double> values);

  /// The communication group of program group `index` (Program.groups).
  comm::Group &group(size_t index) const { return *groups[index]; }
  /// A new group over `axes` of the program's mesh (all of them: the whole
  /// job). A collective call of every rank.
  absl::StatusOr<std::unique_ptr<comm::Group>>
  createGroup(const AxisList &axes) const;

  /// Bytes of all parameters / all optimizer state / the temporary arena.
  uint64_t totalParameterBytes() const { return parameterBytes; }
  uint64_t optimizerStateBytes() const { return stateBytes; }
  /// A pipelined step has one arena per microbatch in flight; this counts
  /// those allocated so far.
  uint64_t arenaBytes() const;

private:
  struct Storage;
  /// What runStep and evaluate begin with: the inputs checked, the step
  /// set, and the working copies current.
  absl::Status prepareStep(const int32_t *tokens, const int32_t *targets,
                           const int32_t *positions, int64_t step);
  engine::StepContext stepContext();
  /// A plain step's inputs into their buffers.
  void copyInputs(const int32_t *tokens, const int32_t *targets,
                  const int32_t *positions);
  explicit Executor(std::shared_ptr<const Program> program);
  absl::Status allocate();
  absl::Status connect(comm::World *world);
  absl::Status connectStages(comm::World *world);
  /// Records that `buffer`'s storage was handed out for writing.
  void noteWrite(uint32_t buffer);

  std::shared_ptr<const Program> prog;
  std::unique_ptr<Storage> storage;
  std::unique_ptr<engine::Placement> placement;
  /// The world of a one-rank program created without one; declared before
  /// the groups, which must be destroyed first.
  std::unique_ptr<comm::World> localWorld;
  /// The job's processes: the world given, or localWorld.
  comm::World *jobWorld = nullptr;
  /// One per program group, by index.
  std::vector<std::unique_ptr<comm::Group>> groups;
  /// A pipelined program's group over "pp" and the runner of its steps.
  std::unique_ptr<comm::Group> stageGroup;
  std::unique_ptr<engine::PipelineStep> pipelineStep;
  /// The pipelined step's memory and kernels (host memory, CPU kernels).
  std::unique_ptr<engine::HostPipelineDevice> pipelineDevice;
  io::Trace *traceTo = nullptr;
  int64_t expertChunks = 1;
  std::unique_ptr<engine::AsyncCollectives> asyncCollectives;
  /// evaluate()'s instructions, found on its first call.
  std::unique_ptr<engine::LossSlice> evalSlice;
  /// Whether threads other than the main one may call MPI (serialized).
  bool threadsMayCommunicate = false;
  /// MPI_THREAD_MULTIPLE: two threads may call collectives of two groups
  /// at once.
  bool threadsCommunicateAtOnce = false;
  std::vector<uint32_t> params, states;
  uint64_t parameterBytes = 0, stateBytes = 0;
  // The last instructions writing the loss and the grad norm: where a step
  // checks them for non-finite values.
  size_t lossReadyAt = 0, gradNormReadyAt = 0;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_ENGINE_EXECUTOR_H
