//===- ChoosePlan.h - moec --plan: the plan a compile follows ---*- C++ -*-===//
#ifndef MOE_TARGET_CHOOSEPLAN_H
#define MOE_TARGET_CHOOSEPLAN_H

#include "moe/Target/CompilePipeline.h"
#include "moe/Target/Hardware.h"
#include "moe/Target/Planner.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::moe {

/// What `moec --plan` searches: --gpus GPUs of --cluster for
/// --global-batch sequences, with --plan-fix, --plan-software, --plan-top
/// and --plan-keep-over-memory.
struct PlanRequest {
  std::string cluster;
  int64_t gpus = 0, globalBatch = 0;
  std::string fix, software;
  unsigned top = 5;
  bool keepOverMemory = false;
  /// --precision and --grad-reduce-dtype as given (empty: not given): the
  /// plans are predicted in the precision the compile resolves
  /// (resolvePrecision: the flag, moe.transformer's `precision`, the
  /// target of the cluster's GPU).
  std::string precision, gradReduceDtype;
  /// The best plan is compiled: only placements moec compiles are searched,
  /// also for another software's run (no ZeRO-1, experts on the data ranks
  /// split over tp).
  bool compile = false;
};

/// The best plan and what compiling it needs besides.
struct ChosenPlan {
  PlanCost cost;
  GpuSpec gpu;
  /// The moec target of the cluster's GPU.
  std::string target;
  /// The capability record the plan was limited to (its target's on its
  /// backend), or none for another software's predicted run.
  const ::moe::caps::Capabilities *backend = nullptr;
  /// The precision the plans were predicted in, which the compile uses.
  PrecisionRecipe precision;
};

/// Searches the plans of `module`'s model (its moe.transformer) for
/// `request`, prints the best ones to `plans` when given, and returns the
/// fastest. A bad request or no plan is reported through `error` (a
/// message for "moec: error: ..."), a module without a model as a
/// diagnostic.
FailureOr<ChosenPlan>
choosePlan(ModuleOp module, const PlanRequest &request, llvm::raw_ostream *plans,
           llvm::function_ref<void(const llvm::Twine &)> error);

/// Sets the flags that compile `chosen` for `globalBatch` sequences: the
/// batch, mesh, pipeline, microbatches, target, precision and FP8.
void applyPlan(const ChosenPlan &chosen, int64_t globalBatch,
               CompileFlags &flags);

/// "compiling #1: --mesh ...", with how moe-run runs it.
void printChosenPlan(const ChosenPlan &chosen, const CompileFlags &flags,
                     llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_CHOOSEPLAN_H
