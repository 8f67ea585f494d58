//===- PipelineTest.cpp - properties of compiled training steps -----------===//
//
// Compiles generated model configurations and checks what must hold for any
// of them: the parameter count is the analytic one, every weight gets one
// AdamW update, and the memory plan never gives two simultaneously live
// tensors overlapping bytes.
//
//===----------------------------------------------------------------------===//
#include "MemoryPlanChecks.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <random>

using namespace mlir;

namespace {

struct Config {
  int64_t vocab, hidden, layers, heads, kvHeads, experts, topK, ffn, seq,
      batch;
  std::vector<int64_t> dense;

  std::string mlir() const {
    std::string denseList;
    for (int64_t d : dense)
      denseList += (denseList.empty() ? "" : ", ") + std::to_string(d);
    return "moe.transformer @m {vocab = " + std::to_string(vocab) +
           ", hidden = " + std::to_string(hidden) +
           ", layers = " + std::to_string(layers) +
           ", heads = " + std::to_string(heads) +
           ", kv_heads = " + std::to_string(kvHeads) +
           ", experts = " + std::to_string(experts) +
           ", top_k = " + std::to_string(topK) +
           ", ffn = " + std::to_string(ffn) + ", seq = " + std::to_string(seq) +
           ", batch = " + std::to_string(batch) + ", dense_layers = array<i64" +
           (dense.empty() ? "" : ": " + denseList) + ">}";
  }

  /// docs/semantics.md's parameter list, counted by hand.
  int64_t expectedParams() const {
    int64_t headDim = hidden / heads;
    int64_t attention = 2 * hidden * heads * headDim +
                        2 * hidden * kvHeads * headDim + 2 * hidden;
    int64_t moe = experts * hidden + experts * 3 * hidden * ffn;
    int64_t denseMlp = 3 * hidden * ffn;
    int64_t numDense = dense.size();
    return 2 * vocab * hidden + hidden + layers * attention +
           numDense * denseMlp + (layers - numDense) * moe;
  }
};

class PipelineTest : public ::testing::Test {
protected:
  PipelineTest() {
    registry.insert<moe::MoEDialect, func::FuncDialect>();
    context = std::make_unique<MLIRContext>(registry);
    context->loadAllAvailableDialects();
  }

  OwningOpRef<ModuleOp> compile(const Config &config) {
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(config.mlir(), context.get());
    EXPECT_TRUE(module) << config.mlir();
    if (!module)
      return module;
    PassManager pm(context.get());
    moe::buildTrainingPipeline(pm);
    EXPECT_TRUE(succeeded(pm.run(*module))) << config.mlir();
    return module;
  }

  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
};

TEST_F(PipelineTest, RandomConfigurationsCompileConsistently) {
  std::mt19937 rng(7);
  auto pick = [&](std::vector<int64_t> choices) {
    return choices[rng() % choices.size()];
  };
  for (int trial = 0; trial < 12; ++trial) {
    Config c;
    c.heads = pick({1, 2, 4});
    c.kvHeads = pick({1, c.heads});
    c.hidden = c.heads * pick({2, 4, 8});
    c.vocab = pick({17, 32, 100});
    c.layers = pick({1, 2, 3});
    c.experts = pick({1, 2, 4, 8});
    c.topK = 1 + rng() % c.experts;
    c.ffn = pick({3, 8, 16});
    c.seq = pick({1, 5, 8});
    c.batch = pick({1, 2, 3});
    for (int64_t l = 0; l < c.layers; ++l)
      if (rng() % 3 == 0)
        c.dense.push_back(l);
    SCOPED_TRACE(c.mlir());

    OwningOpRef<ModuleOp> module = compile(c);
    ASSERT_TRUE(module);
    auto step = module->lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(step);
    moe::ModelStatistics stats = moe::computeModelStatistics(*module, step);
    EXPECT_EQ(stats.totalParams, c.expectedParams());
    // The moments, and each MoE layer's load counter (E floats).
    int64_t moeLayers = c.layers - static_cast<int64_t>(c.dense.size());
    EXPECT_EQ(stats.optimizerStateBytes,
              2 * stats.paramBytes + moeLayers * c.experts * 4);
    EXPECT_GE(stats.arenaBytes, stats.peakLiveBytes);

    // One AdamW update per weight, none twice.
    std::set<std::string> updated;
    step.walk([&](moe::AdamWUpdateOp update) {
      EXPECT_TRUE(updated.insert(update.getParam().str()).second);
    });
    int64_t weights = 0;
    for (auto param : module->getOps<moe::ParamOp>())
      weights += param.getKind() == moe::ParamKind::weight;
    EXPECT_EQ(static_cast<int64_t>(updated.size()), weights);
    moe::testing::expectNoLiveOverlap(step);
  }
}

} // namespace
