//===- PrecisionRecipeTest.cpp - resolving and recording the precision ----===//
//
// The order moe-mixed-precision decides in (flag, then the model's request,
// then the target), the errors that name the bad input, and the record's
// round trip.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Transforms/PrecisionRecipe.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

class PrecisionRecipeTest : public ::testing::Test {
protected:
  PrecisionRecipeTest() {
    context.loadDialect<MoEDialect>();
    module = ModuleOp::create(UnknownLoc::get(&context));
  }
  ~PrecisionRecipeTest() override { module->erase(); }

  /// Records the model's request as moe-expand-transformer does.
  void request(StringRef compute) {
    Builder builder(&context);
    module->setAttr(kPrecisionAttrName,
                    builder.getDictionaryAttr(builder.getNamedAttr(
                        "compute", builder.getStringAttr(compute))));
  }

  PrecisionRecipe resolve(StringRef flag, StringRef reduce, StringRef target) {
    std::string error;
    FailureOr<PrecisionRecipe> recipe =
        resolvePrecision(flag, reduce, module, target, error);
    EXPECT_TRUE(succeeded(recipe)) << error;
    return succeeded(recipe) ? *recipe : PrecisionRecipe();
  }

  MLIRContext context;
  ModuleOp module;
};

TEST_F(PrecisionRecipeTest, TargetDefaults) {
  EXPECT_EQ(resolve("", "", "cpu").compute, Precision::fp32);
  for (StringRef gpu : {"a100", "h100", "h200"}) {
    PrecisionRecipe recipe = resolve("", "", gpu);
    EXPECT_EQ(recipe.compute, Precision::bf16) << gpu.str();
    EXPECT_EQ(recipe.gradReduce, Precision::fp32) << gpu.str();
  }
}

TEST_F(PrecisionRecipeTest, FlagOverridesTheRequestWhichOverridesTheTarget) {
  request("bf16");
  EXPECT_EQ(resolve("", "", "cpu").compute, Precision::bf16);
  EXPECT_EQ(resolve("fp32", "", "cpu").compute, Precision::fp32);
  request("fp32");
  EXPECT_EQ(resolve("", "", "h100").compute, Precision::fp32);
  EXPECT_EQ(resolve("bf16", "bf16", "cpu").gradReduce, Precision::bf16);
}

TEST_F(PrecisionRecipeTest, ErrorsNameTheFlagAndTheKnownValues) {
  std::string error;
  EXPECT_TRUE(failed(resolvePrecision("fp16", "", module, "cpu", error)));
  EXPECT_EQ(error, "--precision: unknown precision 'fp16' (known: fp32, bf16)");
  EXPECT_TRUE(failed(resolvePrecision("bf16", "fp8", module, "cpu", error)));
  EXPECT_EQ(error,
            "--grad-reduce-dtype: unknown precision 'fp8' (known: fp32, bf16)");
  EXPECT_TRUE(failed(resolvePrecision("", "bf16", module, "cpu", error)));
  EXPECT_NE(error.find("--grad-reduce-dtype=bf16 needs --precision=bf16"),
            std::string::npos);
  request("fp64");
  EXPECT_TRUE(failed(resolvePrecision("", "", module, "cpu", error)));
  EXPECT_EQ(error, "moe.transformer precision: unknown precision 'fp64' "
                   "(known: fp32, bf16)");
}

TEST_F(PrecisionRecipeTest, RecordRoundTripsAndFp32LeavesNone) {
  PrecisionRecipe mixed;
  mixed.compute = Precision::bf16;
  mixed.gradReduce = Precision::bf16;
  recordPrecision(module, mixed);
  std::string error;
  FailureOr<PrecisionRecipe> read = readPrecision(module, error);
  ASSERT_TRUE(succeeded(read)) << error;
  EXPECT_TRUE(*read == mixed);
  EXPECT_EQ(mixed.bytesPerParameter(), 4u + 8u + 2u + 2u);
  recordPrecision(module, PrecisionRecipe());
  EXPECT_FALSE(module->hasAttr(kPrecisionAttrName));
}

} // namespace
