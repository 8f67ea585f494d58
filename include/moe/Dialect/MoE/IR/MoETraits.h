//===- MoETraits.h - op traits of the moe dialect ---------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOETRAITS_H
#define MOE_DIALECT_MOE_IR_MOETRAITS_H

#include "mlir/IR/BuiltinTypeInterfaces.h"
#include "mlir/IR/OpDefinition.h"

#include <optional>

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

/// Checks that every attribute of `op` is one of its inherent attributes or
/// a `moe.*` one (which the dialect verifies); otherwise names it and lists
/// the known ones.
LogicalResult verifyKnownAttributes(Operation *op);

/// The trait behind MoE_KnownAttributes (MoEBase.td).
template <typename ConcreteType>
class KnownAttributes
    : public OpTrait::TraitBase<ConcreteType, KnownAttributes> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifyKnownAttributes(op);
  }
};

/// The most elements a tensor of the dialect may have: 2^48 (1 PiB of
/// fp32), so that its byte count and sums of many such counts fit int64.
inline constexpr int64_t kMaxTensorElements = int64_t(1) << 48;

/// The elements of a static `type`, or nullopt past kMaxTensorElements
/// (computed without overflow).
std::optional<int64_t> boundedNumElements(ShapedType type);

/// Checks that every statically shaped tensor `op` reads, makes or names in
/// a type attribute has at most kMaxTensorElements elements.
LogicalResult verifyBoundedTensors(Operation *op);

/// The trait behind MoE_BoundedTensors (MoEBase.td).
template <typename ConcreteType>
class BoundedTensors
    : public OpTrait::TraitBase<ConcreteType, BoundedTensors> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifyBoundedTensors(op);
  }
};

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_MOETRAITS_H
