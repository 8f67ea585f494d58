//===- LossSliceTest.cpp - evaluation steps: the forward pass alone -------===//

#include "TestProgram.h"

#include "moe/Runtime/Engine/Executor.h"
#include "moe/Runtime/Engine/LossSlice.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

namespace moe::rt {
namespace {

std::unique_ptr<Executor> makeExecutor(Program program) {
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program));
  EXPECT_TRUE(executor.ok()) << executor.status();
  if (!executor.ok())
    return nullptr;
  (*executor)->initialize();
  return std::move(*executor);
}

/// Every parameter's and optimizer state's bytes, in program order.
std::vector<uint8_t> stateBytes(Executor &executor) {
  std::vector<uint8_t> bytes;
  const Program &program = executor.program();
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    BufferKind kind = program.buffers[b].kind;
    if (kind == BufferKind::Temporary || kind == BufferKind::Input)
      continue;
    const uint8_t *data = std::as_const(executor).bytes(b);
    bytes.insert(bytes.end(), data, data + program.buffers[b].sizeInBytes());
  }
  return bytes;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch makeBatch(int64_t count, int64_t vocab) {
  Batch batch;
  for (int64_t i = 0; i < count; ++i) {
    batch.tokens.push_back(static_cast<int32_t>((i * 5 + 3) % vocab));
    batch.targets.push_back(static_cast<int32_t>((i * 7 + 2) % vocab));
  }
  return batch;
}

TEST(LossSliceTest, IsTheForwardPassUpToTheLoss) {
  Program program = testing::makeScoredRouterProgram();
  absl::StatusOr<engine::LossSlice> slice = engine::lossSlice(program);
  ASSERT_TRUE(slice.ok()) << slice.status();
  std::vector<int64_t> writers = program.lastWriters();
  // The cross-entropy, without the router's loss added to it.
  uint32_t crossEntropy = engine::evaluatedLoss(program);
  ASSERT_NE(crossEntropy, program.loss);
  EXPECT_TRUE(slice->runs[writers[crossEntropy]]);
  EXPECT_FALSE(slice->runs[writers[program.loss]]);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    std::string name = opcodeName(program.instructions[i].opcode);
    // Nothing after the loss, nothing of the backward pass, no router loss
    // and no update: the expert-load counter and the router's bias stay as
    // they were.
    if (static_cast<int64_t>(i) > writers[program.loss] ||
        name.find("AuxLoss") != std::string::npos ||
        name.find("Grad") != std::string::npos ||
        program.instructions[i].results.empty())
      EXPECT_FALSE(slice->runs[i]) << describeInstruction(program, i);
  }
  EXPECT_TRUE(slice->changedState.empty());
}

// The loss an evaluation gives is the cross-entropy the training step
// computes from the same weights, and the evaluation changes nothing: the step
// after it is the step without it, bit for bit.
TEST(LossSliceTest, EvaluationGivesTheStepsLossAndChangesNothing) {
  for (Program (*make)() :
       {+[] { return testing::makeMoeProgram(); },
        +[] { return testing::makeScoredRouterProgram(); },
        +[] { return testing::makeBf16TinyProgram(); },
        +[] { return testing::makePipelinedTinyProgram(1, 2); }}) {
    Program program = make();
    auto evaluated = makeExecutor(program), control = makeExecutor(program);
    ASSERT_TRUE(evaluated && control);
    // The vocabulary: the embedding table's rows (buffer 0 in each).
    Batch batch =
        makeBatch(evaluated->tokensPerStep(), program.buffers[0].shape[0]);
    std::vector<uint8_t> before = stateBytes(*evaluated);
    absl::StatusOr<float> loss = evaluated->evaluate(
        batch.tokens.data(), batch.targets.data(), /*step=*/0);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(stateBytes(*evaluated), before);
    // The step's cross-entropy, as its LM head writes it.
    uint32_t crossEntropy = engine::evaluatedLoss(program);
    int64_t writer = program.lastWriters()[crossEntropy];
    float stepCrossEntropy = NAN;
    StepHooks hooks;
    hooks.afterInstruction = [&](size_t index, const Instruction &) {
      if (static_cast<int64_t>(index) == writer)
        stepCrossEntropy = *evaluated->data(crossEntropy);
    };
    absl::StatusOr<StepResult> step =
        evaluated->runStep(batch.tokens.data(), batch.targets.data(), 0, hooks);
    absl::StatusOr<StepResult> controlStep =
        control->runStep(batch.tokens.data(), batch.targets.data(), 0);
    ASSERT_TRUE(step.ok() && controlStep.ok());
    EXPECT_EQ(*loss, stepCrossEntropy);
    // The MoE models' loss adds the router's losses to it.
    if (program.model.experts > 0)
      EXPECT_NE(crossEntropy, program.loss);
    EXPECT_EQ(step->loss, controlStep->loss);
    EXPECT_EQ(step->gradNorm, controlStep->gradNorm);
    EXPECT_EQ(stateBytes(*evaluated), stateBytes(*control));
  }
}

} // namespace
} // namespace moe::rt
