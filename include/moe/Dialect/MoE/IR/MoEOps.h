//===- MoEOps.h - ops, attributes and interfaces of moe ---------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEOPS_H
#define MOE_DIALECT_MOE_IR_MOEOPS_H

#include "moe/Dialect/MoE/IR/HfNames.h"
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Dialect/MoE/IR/MoENames.h"
#include "moe/Dialect/MoE/IR/MoETraits.h"
#include "moe/Dialect/MoE/IR/ShardingRule.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "moe/Dialect/MoE/IR/MoEEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/MoE/IR/MoEAttrs.h.inc"

#include "moe/Dialect/MoE/IR/MoEInterfaces.h.inc"

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/IR/MoEOps.h.inc"

namespace mlir::moe {
/// The GEMM inputs of one expert with an FP8 amax history under delayed
/// scaling (x, w1, w3, a, w2, dy, w dy, du, dg): the second dimension of a
/// `fp8_history` parameter. The runtime's kernels index it in this order.
inline constexpr int64_t kFp8HistoryRoles = 9;

/// The most ranks a moe.mesh may have (2^20, ten times the largest training
/// clusters), so that rank counts and per-rank shares stay small integers.
inline constexpr int64_t kMaxMeshRanks = int64_t(1) << 20;

/// Checks `sharding` against a value of `type` used by `op`: the mesh
/// exists, one entry per dimension, known axes, and (unless `type` is
/// already a per-rank block) divisible dimensions.
LogicalResult verifySharding(Operation *op, ShardingAttr sharding, Type type,
                             SymbolTableCollection &symbols,
                             bool typeIsLocal = false);
/// The axes that split dimension 0 of `block` further than `whole`, both
/// shardings of a tensor of `rank` dimensions (null: whole on every rank),
/// after `whole`'s own axes there: empty when the two split it alike, none
/// when they differ otherwise. ZeRO-1 stores a weight's moments (and its
/// fp32 master) as such a block of the rows the forward reads.
std::optional<SmallVector<StringRef>>
rowBlockAxes(ShardingAttr whole, ShardingAttr block, unsigned rank);

/// The weights moe-expand-transformer declares for `op`, whose sizes must be
/// within their maxima (TransformerLimits.h) so that no product overflows.
/// The verifier bounds it by kMaxParameters; moe-import checks it first to
/// name the config's fields.
int64_t transformerParameters(TransformerOp op);

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_MOEOPS_H
