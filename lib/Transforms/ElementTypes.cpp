//===- ElementTypes.cpp - MLIR element types as artifact dtypes -----------===//
//
// The compiler's side of include/moe/Runtime/DType.h: which MLIR element
// type each artifact dtype is, and so how many bytes every tensor takes in
// the memory plan, the reports and the cost model.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/ElementTypes.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::moe;

std::optional<::moe::rt::DType> mlir::moe::artifactDType(Type elementType) {
  using ::moe::rt::DType;
  if (elementType.isF32())
    return DType::F32;
  if (elementType.isBF16())
    return DType::BF16;
  if (elementType.isF16())
    return DType::F16;
  if (elementType.isFloat8E4M3FN())
    return DType::F8E4M3;
  if (elementType.isFloat8E5M2())
    return DType::F8E5M2;
  if (elementType.isSignlessInteger(32))
    return DType::I32;
  if (elementType.isSignlessInteger(64))
    return DType::I64;
  return std::nullopt;
}

FailureOr<::moe::rt::DType> mlir::moe::artifactDTypeAt(Operation *op,
                                                       const Twine &what,
                                                       Type type) {
  if (auto shaped = dyn_cast<ShapedType>(type))
    if (std::optional<::moe::rt::DType> dtype =
            artifactDType(shaped.getElementType()))
      return *dtype;
  return op->emitOpError() << what << " has type " << type
                           << ", whose element type is no artifact dtype "
                              "(known: "
                           << ::moe::rt::knownDTypeNames() << ")";
}

FailureOr<::moe::rt::DType> mlir::moe::artifactDTypeOf(Value value) {
  if (auto result = dyn_cast<OpResult>(value))
    return artifactDTypeAt(result.getOwner(),
                           "result " + Twine(result.getResultNumber()),
                           value.getType());
  auto argument = cast<BlockArgument>(value);
  return artifactDTypeAt(argument.getOwner()->getParentOp(),
                         "argument " + Twine(argument.getArgNumber()),
                         value.getType());
}

uint64_t mlir::moe::elementBytes(Type elementType) {
  if (std::optional<::moe::rt::DType> dtype = artifactDType(elementType))
    return ::moe::rt::dtypeBytes(*dtype);
  // Not an artifact dtype: the planner and the writer refuse the value
  // (artifactDTypeOf); estimates made before then use its width.
  return elementType.isIntOrFloat()
             ? llvm::divideCeil(elementType.getIntOrFloatBitWidth(), 8)
             : sizeof(float);
}

uint64_t mlir::moe::tensorBytes(Type type) {
  // Saturates instead of wrapping; the verifier bounds every moe tensor at
  // 2^48 elements, far below.
  auto shaped = cast<ShapedType>(type);
  uint64_t bytes = elementBytes(shaped.getElementType());
  for (int64_t size : shaped.getShape())
    bytes = llvm::SaturatingMultiply(bytes, static_cast<uint64_t>(size));
  return bytes;
}
