//===- CompilePipeline.cpp - moec's whole compilation as one pipeline -----===//
#include "moe/Target/CompilePipeline.h"
#include "moe/Target/Passes.h"

using namespace mlir;
using namespace mlir::moe;

static std::unique_ptr<Pass> report(const CompileOptions &options,
                                    StringRef kind) {
  PrintReportOptions report;
  report.report = kind.str();
  report.function = options.function;
  if (kind == "cost")
    report.cluster = options.cluster;
  return createPrintReport(report);
}

LogicalResult mlir::moe::buildCompilePipeline(
    OpPassManager &pm, const CompileOptions &options,
    llvm::function_ref<LogicalResult(OpPassManager &)> steps) {
  if (!options.mesh.empty())
    pm.addPass(createSetMesh(SetMeshOptions{options.mesh}));
  if (options.batch > 0 || options.microbatches > 1)
    pm.addPass(createSplitBatch(
        SplitBatchOptions{options.batch, options.microbatches}));
  // Two halves, so that the sharding report shows the global step with its
  // shardings and the pipeline is cut on it, before partitioning rewrites
  // it per rank.
  if (steps) {
    if (failed(steps(pm)))
      return failure();
  } else {
    MixedPrecisionOptions precision;
    precision.function = options.function;
    precision.precision = options.precision;
    precision.gradReduceDtype = options.gradReduceDtype;
    precision.target = options.target;
    std::optional<FuseLinearCrossEntropyOptions> fuseLoss;
    if (options.fuseLinearCrossEntropy) {
      fuseLoss.emplace();
      fuseLoss->target = options.target;
    }
    std::optional<CountExpertLoadsOptions> countLoads;
    if (options.countExpertLoads) {
      countLoads.emplace();
      countLoads->target = options.target;
    }
    PropagateShardingOptions sharding;
    sharding.foldExperts = options.foldExperts;
    sharding.zeroOne = options.zeroOne;
    buildTrainingFrontend(pm, options.sharded, options.fp8, precision, fuseLoss,
                          countLoads, sharding);
  }
  if (options.reportSharding)
    pm.addPass(report(options, "sharding"));
  if (options.planPipeline) {
    PlanPipelineOptions plan;
    plan.function = options.function;
    plan.stages = options.stages;
    plan.virtualStages = options.virtualStages;
    plan.microbatches = options.microbatches;
    plan.schedule = ::moe::pipeline::toString(options.schedule);
    plan.report = options.reportPipeline;
    plan.trace = options.pipelineTrace;
    pm.addPass(createPlanPipeline(plan));
  }
  if (!steps) {
    std::optional<SplitPipelineStagesOptions> split;
    if (options.planPipeline) {
      // The cut, ranks and slots come from the recorded pipeline.
      split.emplace();
      split->function = options.function;
    }
    std::optional<RematerializeOptions> remat;
    if (options.memoryBudget) {
      remat.emplace();
      remat->function = options.function;
      remat->budget = *options.memoryBudget;
    }
    std::optional<SaveExpertActivationsOptions> saveExperts;
    if (options.saveExpertActivations) {
      saveExperts.emplace();
      saveExperts->function = options.function;
    }
    ScheduleCollectivesOptions schedule;
    schedule.function = options.function;
    BucketReductionsOptions buckets;
    buckets.function = options.function;
    buckets.bucketBytes = options.reduceBucketBytes;
    std::optional<FuseGemmEpiloguesOptions> epilogues;
    if (options.fuseGemmEpilogues) {
      epilogues.emplace();
      epilogues->function = options.function;
      epilogues->target = options.target;
    }
    RingAttentionOptions ring;
    ring.function = options.function;
    ring.comm = options.cpComm;
    buildTrainingBackend(pm, options.sharded, split, remat, saveExperts,
                         schedule, buckets, epilogues, ring);
  }
  if (options.reportSharding)
    pm.addPass(report(options, "collectives"));
  if (options.reportMemory)
    pm.addPass(report(options, "memory"));
  if (options.reportCost)
    pm.addPass(report(options, "cost"));
  if (!options.artifact.empty()) {
    WriteArtifactOptions write;
    write.output = options.artifact;
    write.function = options.function;
    write.seed = options.seed;
    write.target = options.target;
    pm.addPass(createWriteArtifact(write));
  }
  return success();
}
