//===- ElementTypes.h - MLIR element types as artifact dtypes ---*- C++ -*-===//
//
// Which artifact dtype (include/moe/Runtime/DType.h) tensors of an MLIR
// element type are. Separate from Transforms.h because it names the
// runtime's ::moe namespace, which files using namespace mlir (and so
// mlir::moe) must not see.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_ELEMENTTYPES_H
#define MOE_TRANSFORMS_ELEMENTTYPES_H

#include "moe/Runtime/DType.h"

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>

namespace mlir::moe {

/// The artifact dtype of tensors of `elementType`: f32, bf16, f16,
/// f8E4M3FN, f8E5M2, i32 or i64; none for another type.
std::optional<::moe::rt::DType> artifactDType(Type elementType);

/// The artifact dtype of a tensor of `type`, or an error on `op`: "<what>
/// has type T, whose element type is no artifact dtype (known: ...)".
FailureOr<::moe::rt::DType> artifactDTypeAt(Operation *op, const Twine &what,
                                            Type type);

/// artifactDTypeAt for a value: its op (or its block's parent), "result 1".
FailureOr<::moe::rt::DType> artifactDTypeOf(Value value);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_ELEMENTTYPES_H
