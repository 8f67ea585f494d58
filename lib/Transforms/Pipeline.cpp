//===- Pipeline.cpp - moec's default compilation pipeline -----------------===//
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::moe::buildTrainingPipeline(OpPassManager &pm) {
  pm.addPass(createExpandTransformer());
  pm.addPass(createAutodiff());
  pm.addPass(createOptimizer());
  pm.addPass(createPlanMemory());
}

void mlir::moe::registerTrainingPipeline() {
  PassPipelineRegistration<>(
      "moe-training-pipeline",
      "expand the model, derive backward and optimizer, plan memory",
      buildTrainingPipeline);
}
