//===- MoENames.h - the names the moe dialect accepts -----------*- C++ -*-===//
//
// The mesh axes moec implements and the discardable `moe.*` attributes its
// passes write. The dialect's verifiers refuse every other name, so that a
// typo (`fsbp`, `moe.pipline_stage`) is an error instead of a job that
// silently ignores it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_DIALECT_MOE_IR_MOENAMES_H
#define MOE_DIALECT_MOE_IR_MOENAMES_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::moe {

//===----------------------------------------------------------------------===//
// Mesh axes
//===----------------------------------------------------------------------===//

/// Axis names the parallelism policy knows, in the order they nest.
inline constexpr llvm::StringLiteral kDataAxis = "dp";
inline constexpr llvm::StringLiteral kFsdpAxis = "fsdp";
inline constexpr llvm::StringLiteral kExpertAxis = "ep";
inline constexpr llvm::StringLiteral kTensorAxis = "tp";
/// Context parallelism: splits the sequence, load-balanced (rank c of cp
/// holds chunks c and 2 cp - 1 - c of 2 cp).
inline constexpr llvm::StringLiteral kContextAxis = "cp";
inline constexpr llvm::StringLiteral kMeshAxes[] = {
    kDataAxis, kFsdpAxis, kExpertAxis, kContextAxis, kTensorAxis};
/// Pipeline stages are not a mesh axis: moec's --pp cuts the step into
/// stages, so a mesh naming `pp` is pointed there.
inline constexpr llvm::StringLiteral kPipelineAxis = "pp";

/// Whether moec implements the mesh axis `name`.
bool isKnownMeshAxis(StringRef name);

/// Why `name` is not a mesh axis, naming the known ones: "unknown axis
/// 'sp': moec implements dp, fsdp, ep, cp and tp (pipeline stages: --pp)", or
/// for `pp`, where pipeline stages come from instead.
std::string unknownMeshAxisMessage(StringRef name);

//===----------------------------------------------------------------------===//
// Discardable attributes (`moe.*` on ops, function arguments and results)
//===----------------------------------------------------------------------===//

/// On the module: the model's sizes (a dictionary, moe-expand-transformer).
inline constexpr llvm::StringLiteral kModelAttrName = "moe.model";
/// On the module: the microbatches a step is split into (moec divides the
/// model's batch by them before expanding it).
inline constexpr llvm::StringLiteral kMicrobatchesAttrName =
    "moe.microbatches";
/// On the module: the mixed-precision recipe, `{compute = "bf16",
/// grad_reduce = "fp32"}` (moe/Transforms/PrecisionRecipe.h); absent for
/// fp32. moe-expand-transformer records moe.transformer's request,
/// moe-mixed-precision the recipe it applied.
inline constexpr llvm::StringLiteral kPrecisionAttrName = "moe.precision";
/// On the module: the target the step is compiled for (moec --target, a
/// name of moe/Runtime/Capabilities.h), which moe-mixed-precision records:
/// what counts the scratch of the backend that runs it
/// (kernelWorkspaceBytes).
inline constexpr llvm::StringLiteral kTargetAttrName = "moe.target";
/// Unit attribute of a module whose step moe-partition rewrote per rank:
/// its parameter types are then this rank's blocks.
inline constexpr llvm::StringLiteral kPartitionedAttrName = "moe.partitioned";

/// On a step's result: the parameter a gradient belongs to.
inline constexpr llvm::StringLiteral kGradOfAttrName = "moe.grad_of";

/// moe-plan-memory: every temporary's arena offset (on its op, one per
/// result), the arena's size and the peak of live bytes (on the step).
inline constexpr llvm::StringLiteral kOffsetsAttrName = "moe.offsets";
inline constexpr llvm::StringLiteral kArenaBytesAttrName = "moe.arena_bytes";
inline constexpr llvm::StringLiteral kPeakLiveBytesAttrName =
    "moe.peak_live_bytes";

/// moe-split-pipeline-stages' tags: the model stage running an op (-1: all
/// stages) and its phase ("forward", "backward", "weight", "optimizer").
inline constexpr llvm::StringLiteral kPipelineStageAttrName =
    "moe.pipeline_stage";
inline constexpr llvm::StringLiteral kPipelinePhaseAttrName =
    "moe.pipeline_phase";
/// On the split step: the pipeline ranks its stages run on (stage % ranks).
inline constexpr llvm::StringLiteral kPipelineRanksAttrName =
    "moe.pipeline_ranks";
/// On the split step: the microbatches each pipeline rank holds at once
/// under the schedule, one arena slot each.
inline constexpr llvm::StringLiteral kPipelineSlotsAttrName =
    "moe.pipeline_slots";

/// On the module: the pipeline moe-plan-pipeline chose, a dictionary of
/// the schedule's kind ("1f1b", ...), stages, virtual_stages,
/// microbatches, and unit_stages (the model stage of every unit).
inline constexpr llvm::StringLiteral kPipelineScheduleAttrName =
    "moe.pipeline_schedule";

/// The propagated shardings and their reasons: on op results (one entry
/// per result) and function arguments.
inline constexpr llvm::StringLiteral kShardingAttrName = "moe.sharding";
inline constexpr llvm::StringLiteral kShardingOriginAttrName =
    "moe.sharding_origin";
/// A policy seed on an op's first result (weaker than the batch and the
/// parameters): its sharding and, per dimension, why.
inline constexpr llvm::StringLiteral kShardingSeedAttrName =
    "moe.sharding_seed";
inline constexpr llvm::StringLiteral kShardingSeedOriginAttrName =
    "moe.sharding_seed_origin";

/// On the step after moe-rematerialize: the model FLOPs it recomputes, those
/// of recomputing every saved activation, and the budget it met.
inline constexpr llvm::StringLiteral kRecomputeFlopsAttrName =
    "moe.recompute_flops";
inline constexpr llvm::StringLiteral kFullRecomputeFlopsAttrName =
    "moe.full_recompute_flops";
inline constexpr llvm::StringLiteral kMemoryBudgetAttrName =
    "moe.memory_budget";
/// On an op moe-rematerialize created: it recomputes a forward value for
/// the backward pass (its FLOPs are not model FLOPs).
inline constexpr llvm::StringLiteral kRecomputedAttrName = "moe.recomputed";

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_MOENAMES_H
