//===- ShardingReport.h - moec --report=sharding ----------------*- C++ -*-===//
#ifndef MOE_TARGET_SHARDINGREPORT_H
#define MOE_TARGET_SHARDINGREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::moe {

/// Prints, for a step whose shardings were propagated: the mesh; every
/// weight and moment with its storage sharding, reason, per-rank shape and
/// bytes; the per-rank totals next to the unsharded ones; and every tensor
/// the step computes with its sharding, reason and per-rank shape.
LogicalResult printShardingReport(ModuleOp module, func::FuncOp step,
                                  llvm::raw_ostream &os);

/// Prints every collective of a partitioned step (kind, group, per-rank
/// shape, bytes sent) and the totals per kind and group.
void printCollectivesReport(func::FuncOp step, llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_SHARDINGREPORT_H
