//===- CostModel.h - predicted step time on a cluster -----------*- C++ -*-===//
//
// The cost model (issue 8) of a compiled, partitioned step on one rank:
//   * each op by the roofline: the larger of its FLOPs at the GPU's fitted
//     GEMM rate (FP8 for FP8 expert GEMMs on GPUs with FP8 tensor cores)
//     and its operand and result bytes at HBM's streaming rate;
//   * each collective by alpha-beta with hierarchical ring algorithms
//     (Collectives.h), over NVLink inside a node and the network across;
//   * a pipelined step by replaying its schedule (moe::pipeline::simulate)
//     with the busiest pipeline rank's forward and backward per microbatch.
// Gradient reductions (collectives only the optimizer reads) overlap the
// backward pass of the last microbatch, as on the GPU's communication
// stream; all other communication is exposed.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_COSTMODEL_H
#define MOE_TARGET_COSTMODEL_H

#include "moe/Pipeline/Schedule.h"
#include "moe/Target/Hardware.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>

namespace mlir::moe {

struct StepCost {
  /// Seconds of ops bound by tensor-core FLOPs, and of the others (bound
  /// by HBM bandwidth).
  double gemmSeconds = 0, memorySeconds = 0;
  /// Seconds of communication per kind ("all-reduce", "expert all-to-all",
  /// ...).
  std::map<std::string, double> commSeconds;
  /// Model FLOPs of the step on this rank, and the ranks.
  double modelFlops = 0;
  int64_t ranks = 1;
  /// Tokens of the whole step (all ranks).
  int64_t tokens = 0;

  /// Seconds of the gradient reductions, and of the backward pass's compute
  /// they can hide behind.
  double gradientReductionSeconds = 0, backwardSeconds = 0;
  /// Seconds of ring attention's key/value transfers that the attention
  /// they feed hides (context parallelism's ring).
  double ringHiddenSeconds = 0;
  /// A pipelined step: its pipeline ranks and microbatches, the busiest
  /// rank (the one reported), and the idle part of the schedule's makespan.
  int64_t pipelineRanks = 1, microbatches = 1, busiestRank = 0;
  /// Peak bytes per rank by the compiled memory plan (--report=memory).
  double peakMemoryBytes = 0;
  double bubbleSeconds = 0;

  double commTotal() const;
  /// The communication the compute does not hide.
  double exposedComm() const;
  double total() const;
};

/// Predicts `step` (partitioned, per rank) on `cluster`; `schedule` is the
/// pipeline schedule of a split step (null otherwise).
StepCost estimateStepCost(ModuleOp module, func::FuncOp step,
                          const ClusterSpec &cluster,
                          const ::moe::pipeline::Schedule *schedule = nullptr);

/// `moec --report=cost`.
void printCostReport(const StepCost &cost, const ClusterSpec &cluster,
                     llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_COSTMODEL_H
