//===- Pipeline.cpp - moec's default compilation pipeline -----------------===//
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::moe::buildTrainingFrontend(
    OpPassManager &pm, bool sharded, const std::optional<Fp8Options> &fp8,
    const MixedPrecisionOptions &precision,
    const std::optional<FuseLinearCrossEntropyOptions> &fuseLoss,
    const std::optional<CountExpertLoadsOptions> &countLoads,
    const PropagateShardingOptions &sharding) {
  pm.addPass(createExpandTransformer());
  if (fuseLoss)
    pm.addPass(createFuseLinearCrossEntropy(*fuseLoss));
  if (countLoads)
    pm.addPass(createCountExpertLoads(*countLoads));
  if (fp8)
    pm.addPass(createFp8(*fp8));
  pm.addPass(createAutodiff());
  pm.addPass(createOptimizer());
  // Before sharding, so every later pass sees the dtypes.
  pm.addPass(createMixedPrecision(precision));
  if (sharded)
    pm.addPass(createPropagateSharding(sharding));
}

void mlir::moe::buildTrainingBackend(
    OpPassManager &pm, bool sharded,
    const std::optional<SplitPipelineStagesOptions> &pipeline,
    const std::optional<RematerializeOptions> &remat,
    const std::optional<SaveExpertActivationsOptions> &saveExperts,
    const ScheduleCollectivesOptions &schedule,
    const BucketReductionsOptions &buckets,
    const std::optional<FuseGemmEpiloguesOptions> &epilogues,
    const RingAttentionOptions &ring) {
  if (sharded) {
    pm.addPass(createPartition());
    pm.addPass(createRingAttention(ring));
  }
  // A pipelined step reduces its gradients after every microbatch.
  if (sharded && !pipeline) {
    pm.addPass(createScheduleCollectives(schedule));
    pm.addPass(createBucketReductions(buckets));
  }
  // On the per-rank step (expert parallelism is known), before the cut.
  if (saveExperts)
    pm.addPass(createSaveExpertActivations(*saveExperts));
  // Rematerialization plans for the pipeline's ranks and slots when there
  // is one, so it runs on the split step.
  if (pipeline)
    pm.addPass(createSplitPipelineStages(*pipeline));
  if (remat)
    pm.addPass(createRematerialize(*remat));
  // On the per-rank step, where partial sums reach their adds through
  // collectives; after the recomputation is chosen, on the ops it clones
  // too (an addend read by the GEMM is not a value remat could drop).
  if (epilogues)
    pm.addPass(createFuseGemmEpilogues(*epilogues));
  pm.addPass(createPlanMemory());
}

void mlir::moe::buildTrainingPipeline(OpPassManager &pm, bool sharded) {
  buildTrainingFrontend(pm, sharded);
  buildTrainingBackend(pm, sharded);
}

void mlir::moe::registerTrainingPipeline() {
  PassPipelineRegistration<>(
      "moe-training-pipeline",
      "expand the model, derive backward and optimizer, plan memory",
      [](OpPassManager &pm) { buildTrainingPipeline(pm); });
}
