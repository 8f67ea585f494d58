//===- PipelinePlanTest.cpp - the cost-balanced stage cut -----------------===//
//
// The cut minimises the slowest chunk: checked against every possible cut of
// small random unit sequences.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Pipeline.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

#include <random>

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The slowest chunk of the best cut of `flops` into `chunks` parts, by
/// trying every cut (exponential; the units are few).
double bruteForce(const std::vector<double> &flops, unsigned chunks,
                  unsigned first = 0) {
  unsigned n = flops.size();
  if (chunks == 1) {
    double sum = 0;
    for (unsigned i = first; i < n; ++i)
      sum += flops[i];
    return sum;
  }
  double best = 1e300, prefix = 0;
  for (unsigned end = first + 1; end + chunks - 1 <= n; ++end) {
    prefix += flops[end - 1];
    best = std::min(best, std::max(prefix, bruteForce(flops, chunks - 1, end)));
  }
  return best;
}

TEST(PipelinePlanTest, CutMinimisesTheSlowestChunk) {
  MLIRContext context;
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    unsigned n = 2 + rng() % 8, stages = 1 + rng() % 3, virtualStages = 1 + rng() % 2;
    if (stages * virtualStages > n)
      continue;
    std::vector<PipelineUnit> units(n);
    std::vector<double> flops(n);
    for (unsigned i = 0; i < n; ++i) {
      units[i].name = "unit " + std::to_string(i);
      units[i].flops = flops[i] = 1 + rng() % 20;
      units[i].weightBytes = rng() % 100;
    }
    FailureOr<PipelinePlan> plan =
        planPipeline(*module, units, stages, virtualStages);
    ASSERT_TRUE(succeeded(plan));
    ASSERT_EQ(plan->chunks.size(), stages * virtualStages);
    double slowest = 0;
    unsigned next = 0;
    for (auto [c, chunk] : llvm::enumerate(plan->chunks)) {
      // Consecutive, covering, interleaved over the stages.
      EXPECT_EQ(chunk.firstUnit, next);
      EXPECT_LE(chunk.firstUnit, chunk.lastUnit);
      EXPECT_EQ(chunk.stage, c % stages);
      EXPECT_EQ(chunk.chunk, c / stages);
      next = chunk.lastUnit + 1;
      slowest = std::max(slowest, chunk.flops);
    }
    EXPECT_EQ(next, n);
    EXPECT_DOUBLE_EQ(slowest, bruteForce(flops, stages * virtualStages));
  }
}

TEST(PipelinePlanTest, TooManyChunksIsAnError) {
  MLIRContext context;
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  std::vector<PipelineUnit> units(3);
  EXPECT_TRUE(failed(planPipeline(*module, units, 2, 2)));
  EXPECT_EQ(message, "cannot cut 3 units (embedding, layers, head) into 4 "
                     "pipeline chunks (2 stages x 2 virtual stages)");
}

} // namespace
