//===- Pipeline.h - cost-balanced pipeline stage cuts -----------*- C++ -*-===//
//
// Cuts the model's layer sequence into pipeline stages. The units are the
// embedding, each decoder layer, and the head (final norm, LM head, loss).
// Each unit has a compute cost (model FLOPs of its forward ops, times 3 for
// forward and backward) and a memory cost (its weights with their gradients
// and AdamW moments, and the activations its forward keeps for backward).
// The cut is the contiguous partition into `stages * virtualStages` chunks
// that minimises the largest chunk's compute, ties broken by memory: not
// equal layer counts, since the embedding and LM head weigh in.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_PIPELINE_H
#define MOE_TRANSFORMS_PIPELINE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "moe/Pipeline/Schedule.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// One unit of the layer sequence.
struct PipelineUnit {
  std::string name; // "embedding", "layer 3", "head"
  double flops = 0;
  uint64_t weightBytes = 0;     // weights only
  uint64_t activationBytes = 0; // kept from forward for backward
};

/// A chunk of consecutive units, run by rank `stage` (chunk `chunk` of it
/// with virtual stages).
struct PipelineChunk {
  unsigned firstUnit = 0, lastUnit = 0; // inclusive
  unsigned stage = 0, chunk = 0;
  double flops = 0;
  /// Weights with their gradients and two AdamW moments, plus activations.
  uint64_t memoryBytes = 0;
};

struct PipelinePlan {
  std::vector<PipelineUnit> units;
  std::vector<PipelineChunk> chunks; // in model order
  unsigned stages = 1, virtualStages = 1;
};

/// The units of a training step produced by the default pipeline (before
/// partitioning), from the ops' locations (moe-expand-transformer names
/// them after their layer).
FailureOr<std::vector<PipelineUnit>> pipelineUnits(ModuleOp module,
                                                   func::FuncOp step);

/// The balanced cut of `units` into stages x virtualStages chunks; fails
/// when there are fewer units than chunks.
FailureOr<PipelinePlan> planPipeline(Operation *diagnosticsOn,
                                     std::vector<PipelineUnit> units,
                                     unsigned stages, unsigned virtualStages);

/// The unit a name (a parameter's, an op's location) belongs to: 0 for the
/// embedding, 1 + i for layer i, layers + 1 for the head; none for anything
/// else (the optimizer).
std::optional<unsigned> pipelineUnitOfName(StringRef name, unsigned layers);
/// The unit an op belongs to, from its location (moe-expand-transformer
/// names ops after their layer); none for unnamed ops.
std::optional<unsigned> pipelineUnitOf(Location loc, unsigned layers);

/// A phase as kPipelinePhaseAttrName spells it: "forward", "backward",
/// "weight", "optimizer".
StringRef toString(::moe::pipeline::Phase phase);

/// Tags every op of `step` (one microbatch's partitioned training step)
/// with its model stage and phase, see moe-split-pipeline-stages;
/// `unitStages[u]` is the model stage of unit u. With
/// `splitWeightGradients` the weight phase is split off the backward and
/// moved after it. Emits an error at the op and fails where the split would
/// break the schedule's order.
/// Model stage s runs on pipeline rank s % `ranks`.
LogicalResult splitPipelineStages(func::FuncOp step, unsigned layers,
                                  ArrayRef<unsigned> unitStages,
                                  unsigned ranks, bool splitWeightGradients);

/// Prints the cut, per stage compute and memory, and the imbalance.
void printPipelineReport(const PipelinePlan &plan, llvm::raw_ostream &os);

/// moe-split-batch: sets the batch of every moe.transformer to `batch` when
/// it is positive, then divides it by `microbatches`, recording them as the
/// module's moe.microbatches. Emits an error at the op and fails when they
/// do not divide it.
LogicalResult splitBatch(ModuleOp module, uint64_t batch,
                         unsigned microbatches);

/// The schedule kind named as ::moe::pipeline::toString names it ("gpipe",
/// "1f1b", "interleaved-1f1b", "zero-bubble"); none for anything else.
std::optional<::moe::pipeline::ScheduleKind>
parseScheduleKind(llvm::StringRef name);

/// The pipeline moe-plan-pipeline chose, as the module records it
/// (kPipelineScheduleAttrName).
struct RecordedPipeline {
  ::moe::pipeline::ScheduleOptions options;
  ::moe::pipeline::Schedule schedule;
  /// The model stage of every unit (embedding, layers, head).
  std::vector<unsigned> unitStages;
};

/// Records `schedule` and the cut `unitStages` on `module`.
void recordPipeline(ModuleOp module, const ::moe::pipeline::Schedule &schedule,
                    llvm::ArrayRef<unsigned> unitStages);

/// The module's recorded pipeline with its schedule rebuilt; none when it
/// records none; an error at the module when the record is malformed.
FailureOr<std::optional<RecordedPipeline>> recordedPipeline(ModuleOp module);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PIPELINE_H
