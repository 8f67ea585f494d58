//===- Transforms.h - the transformations behind moec's passes --*- C++ -*-===//
//
// Each pass is a thin driver over one of these functions, so that tools and
// later passes (sharding, pipelining, rematerialisation) can call them on
// the IR they build.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_TRANSFORMS_H
#define MOE_TRANSFORMS_TRANSFORMS_H

#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::moe {

struct PrecisionRecipe;

/// The function `name` of `module`; otherwise emits "no function named
/// 'name' <purpose>" on the module and fails.
FailureOr<func::FuncOp> lookupFunction(ModuleOp module, StringRef name,
                                       StringRef purpose);

struct Target;
/// The function `name` of `module` for a fusion pass whose fused form the
/// backend of `target` runs when `runsFused` holds of it (a capability);
/// null when it does not (the ops stay apart). Emits an error on the module
/// and fails for an unknown target or function.
FailureOr<func::FuncOp>
lookupFusionFunction(ModuleOp module, StringRef name, StringRef target,
                     llvm::function_ref<bool(const Target &)> runsFused,
                     StringRef purpose);

/// Replaces `transformer` by its parameters and a `forward` function (placed
/// in the transformer's parent module) and returns that function.
FailureOr<func::FuncOp> expandTransformer(TransformerOp transformer);

/// Appends the backward pass to `forward` (single block, one scalar result):
/// afterwards it returns the loss followed by the gradients of all weight
/// parameters of the module, in declaration order, tagged with
/// `moe.grad_of`.
LogicalResult differentiate(func::FuncOp forward);

/// AdamW, clipping and schedule settings (moe.adamw_config's attributes).
struct AdamWSettings {
  float lr = 3.0e-4f, minLr = 0.0f;
  int64_t warmup = 100, decaySteps = 10000;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1.0e-8f, weightDecay = 0.1f;
  float maxGradNorm = 1.0f;

  /// The settings of the module's moe.adamw_config, or the defaults.
  static AdamWSettings fromModule(ModuleOp module);
};

/// Rewrites the training step `step` to `recipe`'s dtypes (see the
/// moe-mixed-precision pass): BF16 working copies of the weights, BF16
/// activations and their gradients, fp32 where the recipe keeps it, and
/// the casts between. Does nothing for fp32.
LogicalResult applyMixedPrecision(func::FuncOp step,
                                  const PrecisionRecipe &recipe);

/// Turns a differentiated function into one training step (see the
/// moe-optimizer pass) and creates the optimizer-state parameters.
LogicalResult appendOptimizerStep(func::FuncOp forwardBackward,
                                  const AdamWSettings &settings);

/// Arena layout of a function's temporaries.
struct MemoryPlan {
  /// Byte offset of every value that lives in the arena (op results other
  /// than moe.get_param, which aliases its parameter).
  llvm::DenseMap<Value, uint64_t> offsets;
  uint64_t arenaBytes = 0;
  /// Largest total size of simultaneously live temporaries.
  uint64_t peakLiveBytes = 0;
  /// Free ranges the planner visited: its work, O(n log n) in the values
  /// (tests bound it instead of timing the planner).
  uint64_t work = 0;
};

/// Bytes per element: the artifact dtype's size (ElementTypes.h; for
/// another type its bit width rounded up, and the planner refuses it).
uint64_t elementBytes(Type elementType);

/// Size in bytes of a statically shaped tensor, its elements' dtype size
/// each (saturating at UINT64_MAX; the verifier bounds moe tensors at 2^48
/// elements).
uint64_t tensorBytes(Type type);

/// Plans the arena of a single-block function by liveness, in O(n log n)
/// (best fit in one program-order sweep). Fails, on the op, when the arena
/// would exceed 2^56 bytes.
FailureOr<MemoryPlan> planMemory(func::FuncOp function);

/// Writes a plan as moe.offsets / moe.arena_bytes / moe.peak_live_bytes.
void annotateMemoryPlan(func::FuncOp function, const MemoryPlan &plan);

/// What one pipeline rank of a split step holds: the weights, moments and
/// amax histories of the stages it updates, the sums over the microbatches
/// of what its optimizer reads (the gradients), and `slots` arena slots.
struct PipelineRankMemory {
  uint64_t paramBytes = 0, optimizerStateBytes = 0, fp8HistoryBytes = 0;
  uint64_t gradientSumBytes = 0;
  /// The kernels' scratch on this rank: the largest of its own stages' ops
  /// (kernelWorkspaceBytes of the rank), outside persistentBytes.
  uint64_t workspaceBytes = 0;
  int64_t slots = 1;
  /// What the rank holds outside its slots.
  uint64_t persistentBytes() const {
    return llvm::SaturatingAdd(paramBytes, optimizerStateBytes,
                               fp8HistoryBytes, gradientSumBytes);
  }
};

/// The pipeline rank that runs `op` of a step split over `ranks` ranks: its
/// stage's (stage % ranks), or none (every rank) for the optimizer ops
/// tagged -1 and for an untagged op.
std::optional<int64_t> pipelineRankRunning(Operation *op, int64_t ranks);

/// Per pipeline rank of a step split by moe-split-pipeline-stages (its
/// `moe.pipeline_ranks` and `moe.pipeline_slots`); empty when not split.
SmallVector<PipelineRankMemory> pipelineRankMemory(ModuleOp module,
                                                   func::FuncOp step);

/// What moe-fp8 runs in FP8, and how.

struct Fp8Policy {
  /// "experts" (the expert GEMMs) or "none" (only the dispatch).
  StringRef gemms;
  Fp8Scaling scaling;
  /// Blockwise scaling's block, and the FP8 dispatch's.
  int64_t block;
  /// Expert parallelism sends tokens as FP8 codes.
  bool dispatch;
  /// Delayed scaling: the past steps an amax history keeps.
  int64_t pastSteps;
  const Target &target;
};

/// Marks the expert GEMMs of `function` to read FP8 inputs as `policy`
/// says (see moe-fp8), declaring the amax histories of delayed scaling
/// before `function`. On a target without FP8 GEMMs, warns and keeps FP8
/// for the dispatch only. Fails, on the function, for an unknown policy, a
/// bad block or history, or nothing to mark.
LogicalResult applyFp8(func::FuncOp function, const Fp8Policy &policy);

/// Model FLOPs of one forward op (a multiply-add is 2; attention over the
/// causal triangle; experts over their assignments); 0 for the rest.
/// Context parallelism's ring (moe-ring-attention): every attention of
/// the per-rank `step` whose keys and values are all-gathered over its
/// sequence axes, and every gradient whose key and value gradients are
/// then reduce-scattered, reads its rank's blocks instead and carries
/// `ring`, where `comm` ("ring", "allgather" or "auto") takes the ring.
LogicalResult passKeysAroundRing(func::FuncOp step, MeshOp mesh,
                                 StringRef comm);

double modelFlops(Operation *op);
/// The score entries of causal attention of `queries` queries over `keys`
/// keys: the triangle s (s + 1) / 2 when they are the same sequence, and
/// for a rank's block of a load-balanced sequence (context parallelism:
/// the keys are the whole) queries * (keys + 1) / 2, its share of the
/// whole's triangle.
double causalScoreEntries(int64_t queries, int64_t keys);
/// The keys an attention (or its gradient) `op` attends to: its key
/// operand's sequence, or with `ring` the whole sequence its ranks pass
/// around (the block times the sequence axes' ranks).
int64_t attendedKeys(Operation *op, Value key,
                     std::optional<ArrayAttr> sequenceAxes, bool ring);
/// The FLOPs of `input [..., K]` times `weight [N, K]` transposed.
double linearFlops(Value input, Value weight);

/// The ops of `step` its loss (result 0) depends on, and the load counters
/// (moe.expert_load) of their routers: the forward pass.
llvm::SetVector<Operation *> forwardOps(func::FuncOp step);
/// Bytes of the forward values the backward pass of `step` reads (saved
/// activations), kept alive from the forward to the backward pass.
uint64_t savedActivationBytes(func::FuncOp step);

/// The most scratch memory the runtime's kernels take while running `step`
/// (outside the arena): what Executor::bytesPerRank counts besides the
/// planned buffers. With `pipelineRank`, of a step split over `ranks`
/// pipeline ranks: only the ops of that rank's stages (and those of every
/// rank, untagged or stage -1) count.
uint64_t
kernelWorkspaceBytes(ModuleOp module, func::FuncOp step,
                     std::optional<int64_t> pipelineRank = std::nullopt,
                     int64_t ranks = 1);

/// Moves the collectives of `step` to where they start earliest (see
/// moe-schedule-collectives): reductions right after what they reduce,
/// parameter all-gathers one layer ahead. Returns how many moved.
unsigned scheduleCollectives(func::FuncOp step);

/// Replaces runs of reductions of `step` over one group by moe.reduce_bucket
/// ops of at most `bucketBytes` of inputs each (see moe-bucket-reductions).
/// Returns how many buckets it made.
unsigned bucketReductions(func::FuncOp step, uint64_t bucketBytes);

/// Replaces every moe.linear of `function` read only by a moe.cross_entropy
/// by one moe.linear_cross_entropy (see moe-fuse-linear-cross-entropy);
/// returns how many it fused.
unsigned fuseLinearCrossEntropy(func::FuncOp function);

/// Folds every moe.add of `step` that one of its terms' GEMMs (a
/// moe.linear or moe.linear_grad_input read only by it) can start from
/// into that GEMM's addend (see moe-fuse-gemm-epilogues); returns how many.
unsigned fuseGemmEpilogues(func::FuncOp step);

/// Declares the load counter `name` (a zero moe.param of kind expert_load,
/// [experts]) with `moduleBuilder` and counts `router`'s selections into it
/// right after the router (moe.expert_load), with the router's selection
/// `bias` and its `rate` when balancing (both null otherwise).
ExpertLoadOp addExpertLoad(OpBuilder &moduleBuilder, RouterOp router,
                           StringRef name, FlatSymbolRefAttr bias,
                           FloatAttr rate);
/// Counts the load of every router of `forward` that has no counter yet
/// (see moe-count-expert-loads); returns how many counters it added.
unsigned countExpertLoads(func::FuncOp forward);

/// The saved up projections of `experts`: f32 [..., k, 2, F].
RankedTensorType expertHiddenType(ExpertsOp experts);
/// Keeps the up projections of every moe.experts of `step` (not expert
/// parallel) for the moe.experts_grad that differentiates it; returns how
/// many layers keep them.
unsigned saveExpertActivations(func::FuncOp step);
/// Drops the saved up projections of `experts` (whose only readers are its
/// gradients, which then recompute them); returns the op that replaces it.
ExpertsOp dropExpertActivations(ExpertsOp experts);

/// Memory of a training step that moe-rematerialize fits into a budget.
struct RematerializationPlan {
  /// The arena's size before and after, and the budget it had to meet.
  uint64_t arenaBefore = 0, arenaAfter = 0, arenaBudget = 0;
  /// Forward values kept for the backward pass, and those recomputed.
  uint64_t keptBytes = 0, recomputedBytes = 0;
  unsigned recomputedOps = 0;
  /// Model FLOPs of the recomputation chosen, and of full recomputation
  /// (the whole forward pass again).
  double recomputeFlops = 0, fullRecomputeFlops = 0;
};

/// Recomputes in the backward pass the forward values of `step` that it
/// reads, cheapest FLOPs per byte first, until the memory plan's arena fits
/// `arenaBudget` bytes; nothing when it already does. Fails, with the
/// numbers, when even recomputing every such value does not fit.
FailureOr<RematerializationPlan> rematerialize(func::FuncOp step,
                                               uint64_t arenaBudget);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_TRANSFORMS_H
