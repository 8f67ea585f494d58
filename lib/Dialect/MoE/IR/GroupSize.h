//===- GroupSize.h - the ranks of a group of mesh axes ----------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_GROUPSIZE_H
#define MOE_DIALECT_MOE_IR_GROUPSIZE_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::moe {

/// The number of ranks in a group over `axes` of the mesh `meshRef` names,
/// after checking (with an error on `op`) that the mesh exists and has each
/// axis once.
FailureOr<int64_t> groupSize(Operation *op, FlatSymbolRefAttr meshRef,
                             ArrayAttr axes, SymbolTableCollection &symbols);

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_GROUPSIZE_H
