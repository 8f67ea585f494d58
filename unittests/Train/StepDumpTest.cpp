//===- StepDumpTest.cpp - loss parts and step dumps -----------------------===//
#include "moe/Runtime/Train/StepDump.h"

#include "TestFiles.h"
#include "TestProgram.h"

#include "nlohmann/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <filesystem>

using namespace moe::rt;
namespace programs = moe::rt::testing;
using moe::testing::ScratchDir;
using programs::bufferNamed;
using programs::instructionWith;

namespace {

std::unique_ptr<Executor> makeExecutor(Program program) {
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program));
  EXPECT_TRUE(executor.ok()) << executor.status();
  (*executor)->initialize(1);
  return std::move(*executor);
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  explicit Batch(const Executor &executor) {
    int64_t vocab = executor.program().model.vocab;
    for (int64_t t = 0; t < executor.tokensPerStep(); ++t) {
      tokens.push_back(static_cast<int32_t>(t % vocab));
      targets.push_back(static_cast<int32_t>((3 * t + 1) % vocab));
    }
  }
};

/// Runs one step with a probe attached as Trainer.cpp attaches it.
train::LossParts runWithProbe(Executor &executor, float *loss = nullptr) {
  train::LossPartsProbe probe(executor);
  StepHooks hooks;
  hooks.beforeInstruction = [&](size_t index, const Instruction &) {
    probe.before(index);
  };
  Batch batch(executor);
  absl::StatusOr<StepResult> result = executor.runStep(
      batch.tokens.data(), batch.targets.data(), /*step=*/0, hooks);
  EXPECT_TRUE(result.ok()) << result.status();
  if (loss && result.ok())
    *loss = result->loss;
  return probe.parts();
}

TEST(StepDumpTest, LossPartsOfAWeightedSumOfCrossEntropyAndAuxLoss) {
  programs::MoeConfig config;
  auto executor = makeExecutor(programs::makeMoeProgram(config));
  float loss = 0;
  train::LossParts parts = runWithProbe(*executor, &loss);
  ASSERT_TRUE(parts.known);
  EXPECT_GT(parts.ce, 0.0f);
  EXPECT_GT(parts.aux, 0.0f);
  EXPECT_NEAR(loss, parts.ce + config.auxCoef * parts.aux, 1e-5f);
}

TEST(StepDumpTest, LossPartsAreReadBeforeAnInPlaceWeightedSum) {
  Program program = programs::makeMoeProgram();
  auto reference = makeExecutor(program);
  train::LossParts expected = runWithProbe(*reference);
  // The loss takes over the cross-entropy's arena range, which the verifier
  // allows for WeightedSum: after it runs, that range holds the total.
  program.buffers[bufferNamed(program, "loss")].offset =
      program.buffers[bufferNamed(program, "ce")].offset;
  auto inPlace = makeExecutor(program);
  train::LossParts parts = runWithProbe(*inPlace);
  ASSERT_TRUE(parts.known);
  EXPECT_EQ(parts.ce, expected.ce);
  EXPECT_EQ(parts.aux, expected.aux);
}

TEST(StepDumpTest, LossPartsUnknownForOtherLossLayouts) {
  // The loss is the cross-entropy itself, not a WeightedSum.
  auto tiny = makeExecutor(programs::makeTinyProgram());
  EXPECT_FALSE(runWithProbe(*tiny).known);
  // A WeightedSum whose operand 0 is not a cross-entropy.
  Program program = programs::makeMoeProgram();
  Instruction &sum =
      program.instructions[instructionWith(program, Opcode::WeightedSum)];
  std::swap(sum.operands[0], sum.operands[1]);
  auto swapped = makeExecutor(program);
  EXPECT_FALSE(runWithProbe(*swapped).known);
}

TEST(StepDumpTest, WritesConfigAndMetricsAtomically) {
  ScratchDir dir;
  Program program = programs::makeMoeProgram();
  program.model.configJson = R"({"hidden": 8})";
  auto executor = makeExecutor(program);
  Batch batch(*executor);
  absl::StatusOr<train::StepDump> dump =
      train::StepDump::begin(dir.file("dump"), *executor, /*step=*/0,
                             batch.tokens.data(), batch.targets.data());
  ASSERT_TRUE(dump.ok()) << dump.status();
  train::LossPartsProbe probe(*executor);
  StepHooks hooks;
  hooks.beforeInstruction = [&](size_t index, const Instruction &inst) {
    probe.before(index);
    dump->before(index, inst);
  };
  absl::StatusOr<StepResult> result = executor->runStep(
      batch.tokens.data(), batch.targets.data(), /*step=*/0, hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(
      dump->finish(result->loss, result->gradNorm, result->lr, probe.parts())
          .ok());

  nlohmann::json config = nlohmann::json::parse(
      moe::testing::readBytes(dir.file("dump/config.json")));
  EXPECT_EQ(config["hidden"], 8);
  EXPECT_EQ(config["step"], 0);
  nlohmann::json metrics = nlohmann::json::parse(
      moe::testing::readBytes(dir.file("dump/metrics.json")));
  EXPECT_FLOAT_EQ(metrics["loss"].get<float>(), result->loss);
  EXPECT_FLOAT_EQ(metrics["ce"].get<float>(), probe.parts().ce);
  // Only the finished files: no temporary file of an atomic write is left.
  std::vector<std::string> names;
  for (const auto &entry :
       std::filesystem::directory_iterator(dir.file("dump")))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "batch.safetensors", "config.json", "grads.safetensors",
                       "metrics.json", "optim_state.safetensors",
                       "optim_state_after.safetensors", "params.safetensors",
                       "params_after.safetensors"}));
}

/// Dumps step 0 of `program` into `dir`, reading it through `state` while
/// `run` runs the step with the hooks a dump needs.
void dumpOneStep(const std::string &dir, train::StepState state,
                 const Executor &shape,
                 const std::function<absl::StatusOr<StepResult>(
                     const int32_t *, const int32_t *, const StepHooks &)> &run) {
  Batch batch(shape);
  absl::StatusOr<train::StepDump> dump = train::StepDump::begin(
      dir, state, /*step=*/0, batch.tokens.data(), batch.targets.data());
  ASSERT_TRUE(dump.ok()) << dump.status();
  train::LossPartsProbe probe(state);
  StepHooks hooks;
  hooks.beforeInstruction = [&](size_t index, const Instruction &inst) {
    probe.before(index);
    dump->before(index, inst);
  };
  absl::StatusOr<StepResult> result =
      run(batch.tokens.data(), batch.targets.data(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(
      dump->finish(result->loss, result->gradNorm, result->lr, probe.parts())
          .ok());
}

// A device backend dumps through the Backend interface (readBuffer, the
// pulled host weights): on the CPU backend that path writes, file for file
// and byte for byte, what the executor's memory gives.
TEST(StepDumpTest, ThroughABackendAsThroughItsExecutor) {
  ScratchDir dir;
  Program program = programs::makeMoeProgram();
  program.model.configJson = R"({"hidden": 8})";
  auto executor = makeExecutor(program);
  dumpOneStep(dir.file("executor"), train::StepState(*executor), *executor,
              [&](const int32_t *tokens, const int32_t *targets,
                  const StepHooks &hooks) {
                return executor->runStep(tokens, targets, 0, hooks);
              });
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createCpuBackend(std::make_shared<const Program>(program), {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->initialize(1).ok());
  dumpOneStep(dir.file("backend"), train::StepState(**backend), *executor,
              [&](const int32_t *tokens, const int32_t *targets,
                  const StepHooks &hooks) {
                return (*backend)->runStep(tokens, targets, 0, hooks);
              });
  int files = 0;
  for (const auto &entry :
       std::filesystem::directory_iterator(dir.file("executor"))) {
    std::string name = entry.path().filename().string();
    EXPECT_EQ(moe::testing::readBytes(dir.file("backend/" + name)),
              moe::testing::readBytes(entry.path().string()))
        << name;
    ++files;
  }
  EXPECT_EQ(files, 8);
}

TEST(StepDumpTest, UnwritableDirectoryIsAnError) {
  ScratchDir dir;
  moe::testing::writeBytes(dir.file("file"), "x");
  auto executor = makeExecutor(programs::makeTinyProgram());
  Batch batch(*executor);
  absl::StatusOr<train::StepDump> dump =
      train::StepDump::begin(dir.file("file/dump"), *executor, 0,
                             batch.tokens.data(), batch.targets.data());
  ASSERT_FALSE(dump.ok());
  EXPECT_THAT(std::string(dump.status().message()),
              ::testing::HasSubstr("file/dump"));
}

} // namespace
