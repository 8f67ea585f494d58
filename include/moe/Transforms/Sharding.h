//===- Sharding.h - seeding and propagating shardings -----------*- C++ -*-===//
//
// Three steps, each reusable on its own:
//   1. parseMeshSpec / setMesh: the mesh from `--mesh dp=2,tp=2`;
//   2. seedShardings: the parallelism policy (data, FSDP, Megatron tensor
//      and expert parallelism) as shardings of the step's inputs and the
//      parameters, each with the reason it was chosen;
//   3. propagateShardings: op-agnostic propagation over the factor rules of
//      ShardingRule.h until every tensor of the step has a sharding.
// The result is kept in the IR: `moe.sharding` / `moe.sharding_origin` on
// op results and function arguments, `sharding` on moe.param.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_SHARDING_H
#define MOE_TRANSFORMS_SHARDING_H

#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallSet.h"

#include <string>
#include <utility>
#include <vector>

namespace mlir::moe {

/// Attribute of moe.param: why each dimension of its storage is split.
inline constexpr llvm::StringLiteral kParamShardingOriginAttrName =
    "sharding_origin";

/// Parses "dp=2,tp=2" into (axis, size) pairs; an error message otherwise
/// (among them an axis moec does not implement, naming the known ones).
FailureOr<std::vector<std::pair<std::string, int64_t>>>
parseMeshSpec(llvm::StringRef spec, std::string &error);

/// Replaces the module's meshes by `moe.mesh @mesh(<axes>)`.
MeshOp setMesh(ModuleOp module,
               llvm::ArrayRef<std::pair<std::string, int64_t>> axes);

/// The module's mesh, if it has exactly one.
MeshOp getMesh(ModuleOp module);

/// Chooses the storage sharding of every weight (and its optimizer state)
/// and the sharding of the step's token inputs from the model and the mesh.
/// Fails with a diagnostic naming the tensor and the axis when a dimension
/// cannot be split as the policy requires (heads not divisible by tp, ...).
/// `foldExperts` names token axes (dp, fsdp or cp) the experts are split
/// over too, after ep: Megatron's MoE parallel folding, whose expert
/// parallel ranks are data or context parallel ranks. `zeroOne` (ZeRO-1)
/// splits each weight's optimizer state (and, under mixed precision, its
/// fp32 master) over the data axes the weight is whole on, along dimension
/// 0, and keeps the weight (or its working copy) whole.
LogicalResult seedShardings(ModuleOp module, func::FuncOp step, MeshOp mesh,
                            llvm::ArrayRef<std::string> foldExperts = {},
                            bool zeroOne = false);

/// Propagates shardings from the seeds (and moe.shard pins) through the
/// factor rules of the step's ops, and records every value's sharding and
/// its reason on the IR.
LogicalResult propagateShardings(func::FuncOp step, MeshOp mesh);

/// The sharding recorded for `value` (a function argument or op result),
/// or null when propagation has not run.
ShardingAttr getRecordedSharding(Value value);
/// The reason recorded with it.
llvm::StringRef getRecordedShardingOrigin(Value value);

/// The longest prefix of `axes` that none of the factors `together` (the
/// ones sharing a tensor with the factor taking them) already has in
/// `factorAxes`.
llvm::SmallVector<llvm::StringRef>
clashFreePrefix(llvm::ArrayRef<llvm::StringRef> axes,
                const llvm::SmallSet<unsigned, 8> &together,
                llvm::ArrayRef<llvm::SmallVector<llvm::StringRef>> factorAxes);

/// The per-rank shape of `type` under `sharding` on `mesh`.
llvm::SmallVector<int64_t> localShape(ShapedType type, ShardingAttr sharding,
                                      MeshOp mesh);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_SHARDING_H
