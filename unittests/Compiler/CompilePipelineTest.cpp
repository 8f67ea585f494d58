//===- CompilePipelineTest.cpp - moec's pipeline, printed and re-parsed ---===//
//
// What moec --dump-pass-pipeline prints must be the pipeline moec runs: for
// every kind of compile (mesh, microbatches, pipeline schedules, FP8,
// rematerialization, seeds), the printed text, parsed back, writes the
// same artifact bytes as the built pipeline. And the pipeline record
// (moe.pipeline_schedule) gives back the schedule it was made from.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoENames.h"
#include "moe/Target/CompilePipeline.h"
#include "moe/Target/Passes.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

#include <string>

using namespace mlir;
namespace pp = ::moe::pipeline;

namespace {

constexpr const char *kModel =
    "moe.transformer @m {vocab = 32, hidden = 16, layers = 2, heads = 2, "
    "kv_heads = 2, experts = 4, top_k = 2, ffn = 16, seq = 8, batch = 8, "
    "dense_layers = array<i64: 0>}";

class CompilePipelineTest : public ::testing::Test {
protected:
  CompilePipelineTest() {
    registry.insert<mlir::moe::MoEDialect, func::FuncDialect>();
    context = std::make_unique<MLIRContext>(registry);
    context->loadAllAvailableDialects();
    static bool registered = [] {
      mlir::moe::registerMoEPasses();
      mlir::moe::registerMoETargetPasses();
      return true;
    }();
    (void)registered;
  }

  ~CompilePipelineTest() override {
    for (const std::string &path : files)
      llvm::sys::fs::remove(path);
  }

  std::string temporaryFile() {
    llvm::SmallString<128> path;
    EXPECT_FALSE(
        llvm::sys::fs::createTemporaryFile("compile-pipeline", "moebin", path));
    files.push_back(std::string(path));
    return files.back();
  }

  /// Runs `pm` on a fresh parse of the model; the bytes it wrote to `path`.
  std::string run(PassManager &pm, const std::string &path) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kModel,
                                                               context.get());
    EXPECT_TRUE(module);
    EXPECT_TRUE(succeeded(pm.run(*module)));
    auto bytes = llvm::MemoryBuffer::getFile(path);
    EXPECT_TRUE(bool(bytes)) << path;
    return bytes ? (*bytes)->getBuffer().str() : std::string();
  }

  static std::string textOf(OpPassManager &pm) {
    std::string text;
    llvm::raw_string_ostream os(text);
    pm.printAsTextualPipeline(os);
    return text;
  }

  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
  std::vector<std::string> files;
};

TEST_F(CompilePipelineTest, PrintedPipelineWritesTheSameArtifact) {
  std::vector<mlir::moe::CompileOptions> compiles(7);
  compiles[1].mesh = "dp=2,tp=2";
  compiles[2].mesh = "dp=2";
  compiles[2].microbatches = 4;
  compiles[2].planPipeline = true;
  compiles[2].stages = 2;
  compiles[2].schedule = pp::ScheduleKind::ZeroBubble;
  compiles[3].microbatches = 4;
  compiles[3].planPipeline = true;
  compiles[3].stages = 2;
  compiles[3].virtualStages = 2;
  compiles[3].schedule = pp::ScheduleKind::Interleaved1F1B;
  compiles[4].mesh = "ep=2";
  compiles[4].fp8.emplace();
  compiles[4].fp8->scaling = "delayed";
  compiles[4].fp8->dispatch = true;
  compiles[5].batch = 16;
  compiles[5].microbatches = 2;
  compiles[5].planPipeline = true;
  compiles[5].schedule = pp::ScheduleKind::GPipe;
  compiles[5].memoryBudget = 1 << 20;
  compiles[6].seed = 99;
  compiles[6].mesh = "fsdp=2";
  for (auto [index, options] : llvm::enumerate(compiles)) {
    SCOPED_TRACE("compile " + std::to_string(index));
    options.sharded = !options.mesh.empty();
    options.artifact = temporaryFile();
    PassManager built(context.get(), ModuleOp::getOperationName());
    ASSERT_TRUE(succeeded(mlir::moe::buildCompilePipeline(built, options)));
    std::string text = textOf(built);

    // The same text, writing elsewhere.
    std::string reparsedPath = temporaryFile();
    std::string reparsedText = text;
    size_t at = reparsedText.find(options.artifact);
    ASSERT_NE(at, std::string::npos) << text;
    reparsedText.replace(at, options.artifact.size(), reparsedPath);
    std::string error;
    llvm::raw_string_ostream errors(error);
    FailureOr<OpPassManager> parsed = parsePassPipeline(reparsedText, errors);
    ASSERT_TRUE(succeeded(parsed)) << reparsedText << "\n" << error;
    PassManager reparsed(context.get(), ModuleOp::getOperationName());
    static_cast<OpPassManager &>(reparsed) = *parsed;
    EXPECT_EQ(textOf(reparsed), reparsedText);

    std::string expected = run(built, options.artifact);
    EXPECT_FALSE(expected.empty());
    EXPECT_TRUE(expected == run(reparsed, reparsedPath)) << text;
  }
}

TEST_F(CompilePipelineTest, RecordGivesBackItsSchedule) {
  for (pp::ScheduleKind kind :
       {pp::ScheduleKind::GPipe, pp::ScheduleKind::OneFOneB,
        pp::ScheduleKind::Interleaved1F1B, pp::ScheduleKind::ZeroBubble})
    for (int stages : {1, 2, 4})
      for (int microbatches : {4, 8}) {
        pp::ScheduleOptions options;
        options.stages = stages;
        options.microbatches = microbatches;
        options.virtualStages =
            kind == pp::ScheduleKind::Interleaved1F1B ? 2 : 1;
        pp::ErrorOr<pp::Schedule> schedule = pp::buildSchedule(kind, options);
        if (!schedule)
          continue;
        SCOPED_TRACE(std::string(pp::toString(kind)) + " over " +
                     std::to_string(stages) + " stages");
        EXPECT_EQ(mlir::moe::parseScheduleKind(pp::toString(kind)), kind);
        std::vector<unsigned> units;
        for (int s = 0; s < stages * options.virtualStages; ++s)
          units.push_back(s);
        OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(
            context.get()));
        mlir::moe::recordPipeline(*module, *schedule, units);
        FailureOr<std::optional<mlir::moe::RecordedPipeline>> recorded =
            mlir::moe::recordedPipeline(*module);
        ASSERT_TRUE(succeeded(recorded));
        ASSERT_TRUE(recorded->has_value());
        const mlir::moe::RecordedPipeline &back = **recorded;
        EXPECT_EQ(back.unitStages, units);
        EXPECT_EQ(back.schedule.kind, kind);
        EXPECT_EQ(back.options.stages, stages);
        EXPECT_EQ(back.options.microbatches, microbatches);
        EXPECT_EQ(back.options.virtualStages, options.virtualStages);
        ASSERT_EQ(back.schedule.ranks.size(), schedule->ranks.size());
        EXPECT_EQ(pp::peakMicrobatchSlots(back.schedule),
                  pp::peakMicrobatchSlots(*schedule));
      }
  EXPECT_EQ(mlir::moe::parseScheduleKind("interleaved"), std::nullopt);
}

} // namespace
