//===- PipelineStep.h - run a step over microbatches and stages -*- C++ -*-===//
//
// A pipelined program (Program.pipeline, version 1.2) is the step of one
// microbatch with every instruction tagged by model stage and phase. This
// rank runs the actions of its pipeline coordinate in schedule order; each
// microbatch in flight has its own copy of the arena and of the tokens and
// targets (a "slot"), taken at its first action and given back after its
// last, so a schedule holding fewer microbatches needs fewer slots. A value
// read on another rank than the one producing it is sent when its producing
// action ends and received when the first action reading it starts, over
// the "pp" group (MPI, through host copies), tagged by transfer and
// microbatch. After the last action the gradients, summed over the
// microbatches, are averaged into one slot where the optimizer instructions
// run.
//
// The runner is the same for every backend: what differs (where memory
// lives, how an instruction runs, how gradients add up) is its Device. The
// CPU executor's is host memory and the CPU kernels; the CUDA backend's is
// device memory and its kernels (lib/Runtime/Cuda/DevicePipeline.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_PIPELINESTEP_H
#define MOE_RUNTIME_ENGINE_PIPELINESTEP_H

#include "moe/Runtime/Engine/Executor.h"
#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>
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
std::vector<std::pair<uint32_t, int32_t>> optimizerSums(const Program &program,
                                                        int32_t rank);

/// The transfers of a (verified) pipelined program, in buffer order.
std::vector<StageTransfer> stageTransfers(const Program &program);

/// The pipeline rank ("pp" coordinate) of world rank `worldRank` of a
/// pipelined program: 0 with one stage ("pp" is mesh axis 0, verified).
int32_t pipelineRankOf(const Program &program, int64_t worldRank);

/// The group over the "pp" axis of `program`'s mesh in `world` (a
/// collective call of the world), or null with one stage (`world` is then
/// not used and may be null).
absl::StatusOr<std::unique_ptr<comm::Group>>
createStageGroup(const Program &program, comm::World *world);

/// Whether pipeline rank `rank` holds each buffer: the parameters,
/// optimizer state and working copies of its own stages, and everything
/// that is not per stage.
std::vector<bool> heldBuffers(const Program &program, int32_t rank);

class PipelineStep {
public:
  /// What a backend provides the runner: memory, copies to and from the
  /// host, its instructions, and the sums of the gradients. Addresses are
  /// the backend's (host or device) as uint8_t *.
  class Device {
  public:
    virtual ~Device() = default;
    /// `bytes` of the backend's memory, which it keeps until it is
    /// destroyed; `what` names it in an out-of-memory error.
    virtual absl::StatusOr<uint8_t *> allocate(uint64_t bytes,
                                               const std::string &what) = 0;
    /// Host to backend memory, and back (a download waits for the data).
    virtual absl::Status upload(uint8_t *to, const void *from,
                                uint64_t bytes) = 0;
    virtual absl::Status download(void *to, const uint8_t *from,
                                  uint64_t bytes) = 0;
    /// Runs instruction `index` on the runner's current pointers.
    virtual absl::Status run(size_t index) = 0;
    /// Runs optimizer instruction `index`: a global norm adds its squares
    /// over `stages` (null with one stage) and skips the `foreign`
    /// gradients, which other stages hold.
    virtual absl::Status runOptimizer(size_t index, comm::Group *stages,
                                      const std::vector<bool> &foreign) = 0;
    /// sum[0, n) = 0; sum += add; into = sum / count (each in fp32, in this
    /// order per element: the sums are the same on every backend).
    virtual absl::Status zero(float *sum, int64_t n) = 0;
    virtual absl::Status accumulate(float *sum, const float *add,
                                    int64_t n) = 0;
    virtual absl::Status average(float *into, const float *sum, int64_t n,
                                 float count) = 0;
    /// The runner pointed its `pointers` at another slot (or back).
    virtual void pointersChanged() {}
  };

  /// The runner of a verified pipelined `program` on pipeline rank `rank`
  /// (this process's "pp" coordinate); `stageGroup` is the group over "pp"
  /// (null with one stage) and must outlive the runner. Fails when the
  /// stage-to-stage messages of a step need more tags than there are.
  static absl::StatusOr<std::unique_ptr<PipelineStep>>
  create(const Program &program, int32_t rank, comm::Group *stageGroup);

  ~PipelineStep();

  /// What a step borrows from its backend: the Device, and the addresses
  /// its instructions read (`pointers`, which Device::run uses): persistent
  /// buffers fixed (null for other stages' weights), while temporaries,
  /// tokens and targets are pointed at the running slot's, and on return at
  /// the slot the optimizer ran in, so that outputs and gradients read as
  /// after a plain step.
  struct Environment {
    Device &device;
    std::vector<uint8_t *> &pointers;
    const StepHooks &hooks;
    /// Where sends and receives record their spans (moe-run --trace).
    io::Trace *trace = nullptr;
  };
  /// Runs the step: `tokens` and `targets` (host memory) hold this rank's
  /// rows of every microbatch, microbatch after microbatch, and so do
  /// `positions` with document masking (else null).
  absl::StatusOr<StepResult> run(const int32_t *tokens, const int32_t *targets,
                                 const int32_t *positions, int64_t step,
                                 Environment env);

  /// The loss of one batch (inputs as run's), changing nothing: each
  /// microbatch's forward actions, running only the instructions `runs`
  /// marks (engine::LossSlice), and only the transfers between stages that
  /// they produce. The mean of `lossBuffer` over the microbatches, on every
  /// pipeline rank.
  absl::StatusOr<float> evaluate(const int32_t *tokens, const int32_t *targets,
                                 const int32_t *positions, int64_t step,
                                 const std::vector<bool> &runs,
                                 uint32_t lossBuffer, Environment env);

  /// Whether this rank holds buffer `b` (parameters and optimizer state of
  /// its own stages; everything else is per slot or shared).
  bool holds(uint32_t b) const { return held[b]; }

  /// Allocates the slots of the microbatches the schedule holds at once on
  /// this rank (at least one, for the optimizer) and the gradient sums, so
  /// that a step does not run out of memory halfway. `base` are the
  /// backend's addresses.
  absl::Status reserve(Device &device, const std::vector<uint8_t *> &base);

  /// Slots allocated (microbatches in flight at the peak).
  size_t slotsAllocated() const { return slots.size(); }

private:
  struct Slot;
  PipelineStep(const Program &program, int32_t rank, comm::Group *stageGroup);
  /// The inputs each microbatch has its own copy of: tokens, targets and,
  /// with document masking, positions.
  std::vector<uint32_t> microbatchInputs() const;
  /// A free slot (allocated if none), holding microbatch `microbatch`'s
  /// rows of `hostInputs` (microbatchInputs' order; none for -1).
  absl::StatusOr<Slot *>
  acquire(int32_t microbatch, Device &device,
          const std::vector<uint8_t *> &base,
          const std::vector<const int32_t *> &hostInputs);
  /// Runs `actions` in order, each microbatch in a slot of its own from
  /// its first action to its last; `hostInputs` are tokens, targets and
  /// positions.
  absl::Status runActions(const std::vector<PipelineAction> &actions,
                          const std::vector<const int32_t *> &hostInputs,
                          int64_t step, Environment &env,
                          const std::vector<uint8_t *> &base);
  absl::Status runAction(const PipelineAction &action, Slot &slot, int64_t step,
                         Environment &env);
  /// Whether transfer `transfer` is sent: always in a step; in an
  /// evaluation, when the slice produces it.
  bool travels(size_t transfer) const;
  absl::Status receive(const PipelineAction &action, Slot &slot,
                       Device &device);
  absl::Status send(const PipelineAction &action, Slot &slot, Device &device);
  absl::Status finishSends(bool all);
  absl::StatusOr<StepResult> optimize(int64_t step, Environment &env);
  /// The mean over the microbatches of the loss the forward actions read
  /// (readLoss), from the stage computing it, on every pipeline rank; `what`
  /// names it in an error.
  absl::StatusOr<double> meanLossOverStages(int64_t step, const char *what);
  absl::StatusOr<float> readScalar(Device &device, const Slot &slot,
                                   uint32_t buffer) const;

  const Program &program;
  int32_t rank;
  comm::Group *stageGroup;
  std::vector<bool> held;
  std::vector<StageTransfer> transfers;
  /// Instructions per (model stage, phase), in program order.
  std::vector<std::vector<size_t>> instructionsOf;
  std::vector<size_t> optimizerInstructions;
  /// Gradient buffers of this rank's stages, with their running sums (in
  /// the backend's memory, from reserve()).
  std::vector<uint32_t> gradients;
  std::vector<float *> gradientSums;
  std::vector<int32_t> gradientStages; // the stage producing each
  /// The AdamW gradients other stages hold.
  std::vector<bool> foreign;
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<Slot *> slotOf;       // by microbatch, while in flight
  std::vector<int32_t> actionsLeft; // by microbatch
  struct PendingSend;
  std::vector<std::unique_ptr<PendingSend>> pendingSends;
  int32_t lossStage = 0;
  /// The last instruction writing each buffer (-1: none).
  std::vector<int64_t> producers;
  /// The loss the forward actions read, and the stage writing it: the
  /// program's in a step, the evaluated one in an evaluation.
  uint32_t readLoss = 0;
  int32_t readLossStage = 0;
  /// While evaluating: the instructions it runs.
  const std::vector<bool> *evalRuns = nullptr;
  double lossSum = 0;
  io::Trace *trace = nullptr; // the running step's
};

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_PIPELINESTEP_H
