//===- ChoosePlan.cpp - moec --plan: the plan a compile follows -----------===//
#include "moe/Target/ChoosePlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Target/KernelCost.h"
#include "moe/Transforms/Target.h"

using namespace mlir;
using namespace mlir::moe;

/// The moec target of a GPU: the first known one of its compute
/// capability (h100 for sm_90), else the CPU.
static std::string targetOf(const GpuSpec &gpu) {
  const ::moe::caps::Capabilities *known = capabilitiesOf(gpu);
  return known ? std::string(known->target) : std::string("cpu");
}

FailureOr<ChosenPlan>
mlir::moe::choosePlan(ModuleOp module, const PlanRequest &request,
                      llvm::raw_ostream *plans,
                      llvm::function_ref<void(const llvm::Twine &)> error) {
  llvm::Expected<ClusterSpec> cluster = loadCluster(request.cluster);
  if (!cluster) {
    error(llvm::toString(cluster.takeError()));
    return failure();
  }
  if (request.gpus > cluster->gpus()) {
    error("--gpus " + Twine(request.gpus) + " exceeds the " +
          Twine(cluster->gpus()) + " GPUs of " + request.cluster);
    return failure();
  }
  FailureOr<ModelShape> model = modelShapeOf(module);
  if (failed(model))
    return failure();
  std::string message;
  FailureOr<PlanConstraints> constraints =
      parsePlanConstraints(request.fix, message);
  if (failed(constraints)) {
    error("--plan-fix: " + message);
    return failure();
  }
  constraints->keepOverMemory = request.keepOverMemory;
  constraints->moecPlacements = request.compile;
  // The plans are predicted in the precision the compile will resolve:
  // the flag, else moe.transformer's `precision` (not yet recorded on the
  // module before moe-expand-transformer), else the GPU's target's default.
  std::string target = targetOf(cluster->gpu);
  std::string precisionFlag = request.precision;
  if (precisionFlag.empty())
    for (TransformerOp transformer : module.getOps<TransformerOp>())
      if (std::optional<Precision> declared = transformer.getPrecision())
        precisionFlag = precisionName(*declared).str();
  FailureOr<PrecisionRecipe> recipe = resolvePrecision(
      precisionFlag, request.gradReduceDtype, module, target, message);
  if (failed(recipe)) {
    error(message);
    return failure();
  }
  FailureOr<SoftwareTraits> software =
      parseSoftwareTraits(request.software, message, *recipe);
  if (failed(software)) {
    error("--plan-software: " + message);
    return failure();
  }
  if (software->moeRun && software->attentionKernel != "moe-run") {
    error("--plan-software: attention=" + software->attentionKernel +
          " describes another software's run (runtime=other); moe-run runs "
          "its own kernel (moe-run)");
    return failure();
  }
  if (software->fusedAttention())
    if (std::optional<std::string> missing =
            checkAttentionKernel(cluster->gpu, software->attentionKernel)) {
      error("--plan-software: " + *missing);
      return failure();
    }
  // Plans for moe-run are plans its backend runs; another software's run
  // (--plan-software runtime=other) is only predicted.
  const Target &planTarget = *lookupTarget(target);
  if (software->moeRun) {
    constraints->backend = &planTarget.capabilities;
    if (std::optional<std::string> refusal =
            checkPrecisionRunnable(*recipe, planTarget.capabilities)) {
      error(*refusal);
      return failure();
    }
  }
  PlanSearchResult result =
      searchPlans(*model, *cluster, request.gpus, request.globalBatch,
                  *constraints, *software, std::max(1u, request.top));
  if (plans)
    printPlans(result, *model, *cluster, request.gpus, request.globalBatch,
               *plans);
  if (result.considered == 0) {
    error("no plan for " + Twine(request.gpus) +
          " GPUs: no split into tp x pp x dp divides the model's heads, "
          "widths and layers and the global batch of " +
          Twine(request.globalBatch));
    return failure();
  }
  if (result.best.empty()) {
    std::string notRunnable;
    if (result.rejectedBackend > 0)
      notRunnable = "; " + std::to_string(result.rejectedBackend) +
                    " of them not runnable: " + result.backendReason;
    error("no plan fits " + Twine(request.gpus) + " x " + cluster->gpu.name +
          " (" + Twine(result.considered) + " considered, " +
          Twine(result.rejectedMemory) + " over memory)" + notRunnable);
    return failure();
  }
  return ChosenPlan{result.best.front(), cluster->gpu, target,
                    constraints->backend, *recipe};
}

void mlir::moe::applyPlan(const ChosenPlan &chosen, int64_t globalBatch,
                          CompileFlags &flags) {
  const ParallelPlan &best = chosen.cost.plan;
  flags.batch = globalBatch;
  flags.mesh = best.meshSpec();
  if (best.foldedOverTp())
    flags.foldExperts = "tp";
  flags.zeroOne = best.zero1;
  flags.stages = best.pp;
  flags.virtualStages = best.virtualStages;
  flags.schedule = best.schedule;
  flags.microbatches = chosen.cost.microbatches;
  flags.target = chosen.target;
  // The compile resolves the same recipe; naming it keeps the two equal.
  flags.precision = precisionName(chosen.precision.compute).str();
  if (chosen.precision.isMixed())
    flags.gradReduceDtype = precisionName(chosen.precision.gradReduce).str();
  if (best.fp8) {
    // The recipe and the dispatch come from the record of the backend the
    // plan is for (none: another software's run, only predicted).
    const ::moe::caps::Capabilities &record =
        lookupTarget(chosen.target)->capabilities;
    std::string recipe = fp8RecipeOf(record);
    if (chosen.gpu.fp8Tflops > 0 && !recipe.empty()) {
      flags.fp8Gemms = "experts";
      flags.fp8Scaling = recipe;
    }
    flags.fp8Dispatch = best.ep > 1 && (record.fp8Dispatch || !chosen.backend);
  }
}

void mlir::moe::printChosenPlan(const ChosenPlan &chosen,
                                const CompileFlags &flags,
                                llvm::raw_ostream &os) {
  os << "compiling #1: --mesh " << flags.mesh;
  if (!flags.foldExperts.empty())
    os << " --fold-experts " << flags.foldExperts;
  if (flags.zeroOne)
    os << " --zero1";
  os << " --pp " << flags.stages << " --virtual-stages " << flags.virtualStages
     << " --microbatches " << flags.microbatches << " --target " << flags.target
     << " --precision " << flags.precision;
  if (!flags.gradReduceDtype.empty())
    os << " --grad-reduce-dtype " << flags.gradReduceDtype;
  // The plan's FP8, so that the line compiles what the plan costed.
  if (!flags.fp8Gemms.empty())
    os << " --fp8=" << flags.fp8Gemms << " --fp8-scaling=" << flags.fp8Scaling;
  if (flags.fp8Dispatch)
    os << " --fp8-dispatch";
  os << "\n";
  // The plan's data-parallel reductions overlap the backward, as moe-run's
  // communication thread does.
  int64_t expertChunks = chosen.cost.expertChunks;
  os << "  run it with moe-run --async-collectives";
  if (expertChunks > 1)
    os << " --expert-chunks " << expertChunks;
  os << " (the plan overlaps gradient reductions with the backward"
     << (expertChunks > 1 ? ", and the expert exchange with the expert GEMMs"
                          : "")
     << ")\n";
  if (chosen.cost.plan.remat != Remat::None)
    os << "  remat=" << toString(chosen.cost.plan.remat)
       << " is the plan's; moec recomputes in the compiled step only under "
          "--memory-budget\n";
}
