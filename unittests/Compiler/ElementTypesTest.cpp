//===- ElementTypesTest.cpp - MLIR element types as artifact dtypes -------===//
//
// Every artifact dtype has its MLIR element type and back, with the size
// the runtime gives it; another element type has none.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/ElementTypes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

namespace {

using ::moe::rt::DType;

TEST(ElementTypes, EveryDTypeHasItsMlirType) {
  mlir::MLIRContext context;
  mlir::Builder b(&context);
  const std::pair<mlir::Type, DType> types[] = {
      {b.getF32Type(), DType::F32},
      {b.getI32Type(), DType::I32},
      {b.getBF16Type(), DType::BF16},
      {b.getF16Type(), DType::F16},
      {b.getFloat8E4M3FNType(), DType::F8E4M3},
      {b.getFloat8E5M2Type(), DType::F8E5M2},
      {b.getI64Type(), DType::I64}};
  ASSERT_EQ(std::size(types), size_t(::moe::rt::kNumDTypes));
  for (auto [type, dtype] : types) {
    std::string printed;
    llvm::raw_string_ostream(printed) << type;
    SCOPED_TRACE(printed);
    EXPECT_EQ(mlir::moe::artifactDType(type), dtype);
    // Messages name a dtype as the MLIR type prints.
    EXPECT_EQ(::moe::rt::dtypeName(dtype), printed);
    EXPECT_EQ(mlir::moe::elementBytes(type), ::moe::rt::dtypeBytes(dtype));
  }
}

TEST(ElementTypes, OtherTypesAreNoDType) {
  mlir::MLIRContext context;
  mlir::Builder b(&context);
  const mlir::Type others[] = {
      b.getF64Type(), b.getI8Type(), b.getI1Type(),
      b.getIntegerType(32, /*isSigned=*/false), b.getFloat8E4M3FNUZType(),
      b.getIndexType()};
  for (mlir::Type type : others)
    EXPECT_EQ(mlir::moe::artifactDType(type), std::nullopt);
}

} // namespace
