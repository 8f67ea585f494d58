//===- ModelStatistics.h - sizes, FLOPs and memory of a step ----*- C++ -*-===//
#ifndef MOE_TARGET_MODELSTATISTICS_H
#define MOE_TARGET_MODELSTATISTICS_H

#include "moe/Transforms/PrecisionRecipe.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

namespace mlir::moe {

struct ModelStatistics {
  std::string name;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0;
  int64_t experts = 0, topK = 0, ffn = 0, batch = 0, seq = 0;
  /// Elements of all weights, and of those one token uses (its top-k
  /// experts instead of all of them).
  int64_t totalParams = 0, activeParams = 0;
  /// Model FLOPs of one step: 3x the forward's matmul FLOPs (forward plus
  /// backward, not counting recomputation), causal attention counted half.
  double flopsPerStep = 0;
  uint64_t paramBytes = 0, optimizerStateBytes = 0, inputBytes = 0;
  /// Delayed FP8 scaling's amax histories (kept across steps).
  uint64_t fp8HistoryBytes = 0;
  uint64_t arenaBytes = 0, peakLiveBytes = 0;
  /// Parts of the arena: the gradients the optimizer reads, and the forward
  /// values kept for the backward pass.
  uint64_t gradientBytes = 0, keptActivationBytes = 0;
  /// Of the kept activations, the experts' saved up projections (w1 x and
  /// w3 x, moe-save-expert-activations).
  uint64_t savedExpertBytes = 0;
  /// The kernels' own scratch, outside the arena (kernelWorkspaceBytes).
  uint64_t workspaceBytes = 0;
  /// moe-rematerialize's budget (0: none) and the model FLOPs it
  /// recomputes, against recomputing every kept activation.
  uint64_t memoryBudget = 0;
  unsigned recomputedOps = 0;
  double recomputeFlops = 0, fullRecomputeFlops = 0;
  /// Ranks of the mesh the step is partitioned over (times the pipeline
  /// ranks).
  int64_t ranks = 1;
  /// A pipelined step: the microbatches the busiest rank holds at once, one
  /// arena and one set of inputs each; 0 without a pipeline.
  int64_t pipelineSlots = 0;
  /// A pipelined step: the sums over the microbatches of the gradients
  /// (what the optimizer reads) the busiest rank keeps outside its slots.
  uint64_t gradientSumBytes = 0;

  /// The precision recorded on the module (moe.precision; fp32 without).
  PrecisionRecipe precision;
  /// BF16 working copies of the weights (counted apart from `paramBytes`,
  /// the fp32 masters).
  uint64_t workingCopyBytes = 0;
  /// Bytes per parameter as the program stores them, from the element
  /// types of an AdamW update's master, moments, gradient and working copy
  /// (0 without an optimizer step).
  uint64_t masterElementBytes = 0, momentElementBytes = 0,
           gradientElementBytes = 0, workingCopyElementBytes = 0;
  /// Activations kept for the backward, and the bytes the step's
  /// collectives move per rank, by element type ("bf16", "f32", ...).
  std::map<std::string, uint64_t> keptActivationBytesByType, messageBytesByType;

  /// The most memory the rank holds at once: weights, state, the arena and
  /// inputs of each microbatch in flight, and the kernels' scratch.
  uint64_t peakBytes() const;
};

/// Statistics of `step` from the module's moe.model attribute, its
/// parameters and the forward ops of the step.
ModelStatistics computeModelStatistics(ModuleOp module, func::FuncOp step);

/// The model and optimizer settings as a JSON object (for the artifact).
std::string configJson(ModuleOp module, func::FuncOp step);

/// Prints the per-rank memory report of `moec --report=memory`.
void printMemoryReport(const ModelStatistics &stats, llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_MODELSTATISTICS_H
