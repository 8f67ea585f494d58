//===- MoEAttrs.td - attributes of the moe dialect ---------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEATTRS_TD
#define MOE_DIALECT_MOE_IR_MOEATTRS_TD

include "moe/Dialect/MoE/IR/MoEBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def MoE_ShardingAttr : AttrDef<MoE_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "how a tensor is split over the axes of a device mesh";
  let description = [{
    One entry per tensor dimension: the mesh axes that dimension is split
    over, major to minor (`{}`: not split). A dimension of size `n` split
    over axes of sizes `a, b` holds `n / (a * b)` elements per rank; rank
    coordinates on the axes pick the block, the first axis outermost. Axes
    the sharding does not name hold replicas.

    Constraints:
    * every axis is one of the mesh axes moec implements (`dp`, `fsdp`,
      `ep`, `tp`) and appears at most once overall;
    * where it is used (`moe.shard`, `moe.param`), the sharding names an
      existing `moe.mesh`, one entry per dimension of the tensor, axes of
      that mesh, and each dimension is divisible by the product of its axes'
      sizes.

    Example: the batch of a `[8, 64, 64]` activation split over `dp` and
    `ep`, its features over `tp`:

    ```mlir
    #moe.sharding<@mesh, [{dp, ep}, {}, {tp} ]>
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$mesh,
                        "::mlir::ArrayAttr":$dims);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axes of dimension `dim`.
    ::llvm::SmallVector<::llvm::StringRef> axesOf(unsigned dim) const;
    /// The sharding of a tensor of `rank` dimensions split over nothing.
    static ShardingAttr getReplicated(::mlir::FlatSymbolRefAttr mesh,
                                      unsigned rank);
    /// Builds a sharding from per-dimension axis names.
    static ShardingAttr get(::mlir::FlatSymbolRefAttr mesh,
        ::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>> dims);
    /// Whether no dimension is split.
    bool isReplicated() const;
  }];
  let skipDefaultBuilders = 0;
}

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_TD
