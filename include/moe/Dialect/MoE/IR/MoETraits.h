//===- MoETraits.h - op traits of the moe dialect ---------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOETRAITS_H
#define MOE_DIALECT_MOE_IR_MOETRAITS_H

#include "mlir/IR/OpDefinition.h"

namespace mlir::moe {

/// Checks that every float attribute of `op` (FloatAttr and dense f32
/// arrays) holds finite values.
LogicalResult verifyFiniteFloatAttributes(Operation *op);

/// The trait behind MoE_FiniteFloatAttributes (MoEBase.td).
template <typename ConcreteType>
class FiniteFloatAttributes
    : public OpTrait::TraitBase<ConcreteType, FiniteFloatAttributes> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifyFiniteFloatAttributes(op);
  }
};

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_MOETRAITS_H
