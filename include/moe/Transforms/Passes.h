//===- Passes.h - moec passes -----------------------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSES_H
#define MOE_TRANSFORMS_PASSES_H

#include "moe/Dialect/MoE/IR/MoEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <optional>

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Transforms/Passes.h.inc"

/// Adds the default compilation pipeline of moec: expand, fuse the LM head
/// with its loss, autodiff,
/// optimizer, mixed precision (the module's request, else fp32), (with
/// `sharded`: sharding propagation and partitioning,) memory planning.
void buildTrainingPipeline(OpPassManager &pm, bool sharded = false);

/// The two halves of buildTrainingPipeline: up to sharding propagation,
/// and from partitioning on (so tools can look at the sharded global step
/// in between).
/// With `fp8`, the frontend marks the GEMMs to run in FP8 (moe-fp8) before
/// autodiff; `precision` is moe-mixed-precision's request (the flags and the
/// target), after the optimizer. With `fuseLoss`, the LM head and its
/// cross-entropy become one op (moe-fuse-linear-cross-entropy) right after
/// the expansion. With `countLoads`, each router's load is counted for the
/// metrics (moe-count-expert-loads) where the target runs it. With `pipeline`,
/// the backend also splits the step into pipeline stages and phases
/// (moe-split-pipeline-stages) before planning its memory.
void buildTrainingFrontend(
    OpPassManager &pm, bool sharded = false,
    const std::optional<Fp8Options> &fp8 = std::nullopt,
    const MixedPrecisionOptions &precision = {},
    const std::optional<FuseLinearCrossEntropyOptions> &fuseLoss =
        FuseLinearCrossEntropyOptions{},
    const std::optional<CountExpertLoadsOptions> &countLoads =
        CountExpertLoadsOptions{},
    const PropagateShardingOptions &sharding = {});
/// With `saveExperts`, it keeps the experts' up projections for their
/// backward (moe-save-expert-activations) before the pipeline cut; with
/// `remat`, it recomputes activations to fit a memory budget
/// (moe-rematerialize) first. A sharded step that is not pipelined has its
/// collectives scheduled early (moe-schedule-collectives, `schedule`) and
/// its reductions in buckets (moe-bucket-reductions, `buckets`). With
/// `epilogues`, adds fold into the GEMMs that feed them
/// (moe-fuse-gemm-epilogues) on the per-rank step.
void buildTrainingBackend(
    OpPassManager &pm, bool sharded = false,
    const std::optional<SplitPipelineStagesOptions> &pipeline = std::nullopt,
    const std::optional<RematerializeOptions> &remat = std::nullopt,
    const std::optional<SaveExpertActivationsOptions> &saveExperts =
        SaveExpertActivationsOptions{},
    const ScheduleCollectivesOptions &schedule = {},
    const BucketReductionsOptions &buckets = {},
    const std::optional<FuseGemmEpiloguesOptions> &epilogues =
        FuseGemmEpiloguesOptions{},
    const RingAttentionOptions &ring = {});

/// Registers the default pipeline as `moe-training-pipeline`.
void registerTrainingPipeline();

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSES_H
