//===- PlanMemoryTest.cpp - the arena planner and its free list -----------===//
//
// The free list's best fit, coalescing and frontier; the planner's plans
// (valid on every pipeline rank) and its work, counted rather than timed:
// it must grow like n log n in the step's values, not like n^2, as the
// model gets deeper.
//
//===----------------------------------------------------------------------===//
#include "MemoryPlanChecks.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/ArenaFreeList.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "gtest/gtest.h"

using namespace mlir;

namespace {

TEST(ArenaFreeList, BestFitTakesTheSmallestRangeThatHolds) {
  moe::ArenaFreeList list;
  // Used: [0, 256). Then free [0, 128) and [192, 224): two holes.
  list.take(0, 256);
  list.release(0, 128);
  list.release(192, 32);
  EXPECT_EQ(list.bestFit(32), 192u);  // the exact fit, not the first
  EXPECT_EQ(list.bestFit(64), 0u);    // only the larger hole holds it
  EXPECT_EQ(list.bestFit(512), 256u); // none does: the frontier
  list.take(192, 32);
  EXPECT_EQ(list.bestFit(32), 0u);
}

TEST(ArenaFreeList, ReleasedNeighboursCoalesceAndLowerTheFrontier) {
  moe::ArenaFreeList list;
  list.take(0, 64);
  list.take(64, 64);
  list.take(128, 64);
  list.release(0, 64);
  list.release(64, 64);
  // [0, 128) is one range now.
  EXPECT_EQ(list.bestFit(128), 0u);
  // Releasing the top lowers the frontier through the free range below.
  list.release(128, 64);
  EXPECT_EQ(list.bestFit(1024), 0u);
}

TEST(ArenaFreeList, TakingAboveTheFrontierLeavesTheGapFree) {
  moe::ArenaFreeList list;
  list.take(0, 64);
  list.take(256, 64);
  EXPECT_EQ(list.bestFit(192), 64u);
  EXPECT_EQ(list.firstFitFrom(0, 64), 64u);
  EXPECT_EQ(list.firstFitFrom(100, 64), 100u); // inside the gap
  EXPECT_EQ(list.firstFitFrom(200, 64), 320u); // the gap ends at 256
}

class PlanMemoryTest : public ::testing::Test {
protected:
  PlanMemoryTest() {
    registry.insert<moe::MoEDialect, func::FuncDialect>();
    context = std::make_unique<MLIRContext>(registry);
    context->loadAllAvailableDialects();
    moe::registerMoEPasses();
  }

  /// The tiny model's widths with `layers` layers, compiled by the passes
  /// `pipeline` lists.
  OwningOpRef<ModuleOp> compile(int64_t layers, StringRef pipeline) {
    std::string model =
        "moe.transformer @m {vocab = 256, hidden = 64, layers = " +
        std::to_string(layers) +
        ", heads = 4, kv_heads = 2, experts = 4, top_k = 2, ffn = 128, "
        "seq = 16, batch = 2, dense_layers = array<i64: 0>}";
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(model, context.get());
    EXPECT_TRUE(module);
    PassManager pm(context.get());
    EXPECT_TRUE(succeeded(parsePassPipeline(pipeline, pm)));
    EXPECT_TRUE(succeeded(pm.run(*module)));
    return module;
  }

  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
};

constexpr StringLiteral kTraining =
    "moe-expand-transformer, moe-autodiff, moe-optimizer, moe-plan-memory";

TEST_F(PlanMemoryTest, WorkGrowsLinearlyWithLayers) {
  // Per value planned, the work of 8x deeper models: n log n makes it grow
  // by log(8n) / log(n), n^2 (every placed value against every other) by 8.
  std::vector<double> perValue;
  for (int64_t layers : {4, 32}) {
    OwningOpRef<ModuleOp> module = compile(layers, kTraining);
    auto step = module->lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(step);
    FailureOr<moe::MemoryPlan> plan = moe::planMemory(step);
    ASSERT_TRUE(succeeded(plan));
    perValue.push_back(static_cast<double>(plan->work) /
                       plan->offsets.size());
    moe::testing::expectNoLiveOverlap(step);
  }
  EXPECT_LT(perValue[1], 1.5 * perValue[0])
      << "work per value: " << perValue[0] << " at 4 layers, "
      << perValue[1] << " at 32";
}

TEST_F(PlanMemoryTest, PipelinedPlanIsValidOnEveryRank) {
  // 10 units (embedding, 8 layers, head) over 4 stages on 2 ranks: values
  // sent between stages and optimizer scalars are held by several ranks.
  OwningOpRef<ModuleOp> module =
      compile(8, "moe-expand-transformer, moe-autodiff, moe-optimizer, "
                 "moe-split-pipeline-stages{unit-stages=0,0,0,1,1,2,2,3,3,3 "
                 "ranks=2}, moe-plan-memory");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(step);
  moe::testing::expectNoLiveOverlap(step);
  // Each rank holds about half of the model's values: its arena is smaller
  // than the arena of the same step on one rank.
  auto ranks = step->getAttrOfType<IntegerAttr>(moe::kPipelineRanksAttrName);
  ASSERT_TRUE(ranks && ranks.getInt() == 2);
  uint64_t split =
      step->getAttrOfType<IntegerAttr>(moe::kArenaBytesAttrName).getInt();
  step->removeAttr(moe::kPipelineRanksAttrName);
  FailureOr<moe::MemoryPlan> whole = moe::planMemory(step);
  ASSERT_TRUE(succeeded(whole));
  EXPECT_LT(split, whole->arenaBytes);
}

TEST_F(PlanMemoryTest, ArenaIsAtLeastThePeakAndPlansAreStable) {
  OwningOpRef<ModuleOp> module = compile(6, kTraining);
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(step);
  FailureOr<moe::MemoryPlan> first = moe::planMemory(step);
  FailureOr<moe::MemoryPlan> second = moe::planMemory(step);
  ASSERT_TRUE(succeeded(first) && succeeded(second));
  EXPECT_GE(first->arenaBytes, first->peakLiveBytes);
  EXPECT_EQ(first->arenaBytes, second->arenaBytes);
  for (auto [value, offset] : first->offsets)
    EXPECT_EQ(second->offsets.lookup(value), offset);
}

TEST_F(PlanMemoryTest, EachValueTakesItsDTypesBytes) {
  // 48 bf16 elements are 96 bytes (f32 would be 192): they take two 64-byte
  // units, and the i64 and f8E5M2 values after them their own sizes.
  context->allowUnregisteredDialects();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      R"mlir(
      func.func @f() {
        %a = "test.make"() : () -> tensor<4x12xbf16>
        %b = "test.make"() : () -> tensor<3xi64>
        %c = "test.make"() : () -> tensor<65xf8E5M2>
        "test.use"(%a, %b, %c) : (tensor<4x12xbf16>, tensor<3xi64>,
                                  tensor<65xf8E5M2>) -> ()
        return
      })mlir",
      context.get());
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<func::FuncOp>("f");
  FailureOr<moe::MemoryPlan> plan = moe::planMemory(f);
  ASSERT_TRUE(succeeded(plan));
  EXPECT_EQ(plan->peakLiveBytes, 96u + 24u + 65u);
  EXPECT_EQ(plan->arenaBytes, 128u + 64u + 128u);
  SmallVector<uint64_t> offsets;
  for (Operation &op : f.getBody().front())
    for (Value result : op.getResults()) {
      offsets.push_back(plan->offsets.lookup(result));
      EXPECT_EQ(offsets.back() % 64, 0u);
    }
  EXPECT_EQ(offsets, (SmallVector<uint64_t>{0, 128, 192}));
}

TEST(TensorBytes, ComeFromTheElementType) {
  MLIRContext context;
  Builder b(&context);
  auto bytes = [&](Type element) {
    return moe::tensorBytes(RankedTensorType::get({3, 5}, element));
  };
  EXPECT_EQ(bytes(b.getF32Type()), 60u);
  EXPECT_EQ(bytes(b.getI32Type()), 60u);
  EXPECT_EQ(bytes(b.getBF16Type()), 30u);
  EXPECT_EQ(bytes(b.getF16Type()), 30u);
  EXPECT_EQ(bytes(b.getFloat8E4M3FNType()), 15u);
  EXPECT_EQ(bytes(b.getFloat8E5M2Type()), 15u);
  EXPECT_EQ(bytes(b.getI64Type()), 120u);
  EXPECT_EQ(moe::tensorBytes(RankedTensorType::get({}, b.getBF16Type())), 2u);
}

} // namespace
