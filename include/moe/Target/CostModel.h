//===- CostModel.h - predicted step time on a cluster -----------*- C++ -*-===//
//
// A first cost model (issue 8) of a compiled, partitioned step on one rank:
//   * each op by the roofline: the larger of its FLOPs at the GPU's peak
//     (FP8 for FP8 expert GEMMs on GPUs with FP8 tensor cores) and its
//     operand and result bytes at HBM bandwidth;
//   * each collective by alpha-beta with ring algorithms: an all-reduce
//     moves 2 (n-1)/n of its bytes in 2 (n-1) steps, an all-gather, a
//     reduce-scatter and the expert all-to-all (n-1)/n in n-1 steps, over
//     NVLink when the group fits in a node and over the network otherwise.
// No overlap is assumed yet, nor a pipeline bubble: the step is the sum.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_COSTMODEL_H
#define MOE_TARGET_COSTMODEL_H

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

  double commTotal() const;
  double total() const { return gemmSeconds + memorySeconds + commTotal(); }
};

/// Predicts `step` (partitioned, per rank) on `cluster`.
StepCost estimateStepCost(ModuleOp module, func::FuncOp step,
                          const ClusterSpec &cluster);

/// `moec --report=cost`.
void printCostReport(const StepCost &cost, const ClusterSpec &cluster,
                     llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_COSTMODEL_H
