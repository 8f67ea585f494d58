//===- StepCheckTest.cpp - a step's device checks as the CPU reports them -===//
//
// What the host makes of the StepCheck the kernels leave: the CPU
// executor's message for the same failure, word for word, so a run reads
// the same on either backend.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/StepCheck.h"

#include "moe/Runtime/Engine/Executor.h"
#include "moe/Runtime/Engine/StepChecks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <limits>

namespace moe::rt::cuda {
namespace {

using ::testing::HasSubstr;

/// tokens [2, 3] -> Embedding (instruction 0), targets [2, 3] ->
/// CrossEntropy (instruction 1).
Program twoInstructions() {
  Program program;
  Buffer tokens;
  tokens.name = "tokens";
  tokens.kind = BufferKind::Input;
  tokens.dtype = DType::I32;
  tokens.shape = {2, 3};
  Buffer targets = tokens;
  targets.name = "targets";
  program.buffers = {tokens, targets};
  Instruction embedding;
  embedding.opcode = Opcode::Embedding;
  embedding.operands = {0};
  embedding.location = "model.mlir:4:5";
  Instruction loss;
  loss.opcode = Opcode::CrossEntropy;
  loss.operands = {1};
  loss.location = "model.mlir:9:7";
  program.instructions = {embedding, loss};
  return program;
}

/// A bad id `id` at `position` of buffer `idsBuffer`, found by
/// `instruction` against [0, 64).
StepCheck badId(StepCheck::Kind kind, uint32_t instruction, uint32_t idsBuffer,
                int32_t id, int64_t position) {
  StepCheck check{};
  check.kind = kind;
  check.instruction = instruction;
  check.idsBuffer = idsBuffer;
  check.id = id;
  check.position = position;
  check.limit = 64;
  return check;
}

TEST(StepCheckTest, PassedIsOk) {
  StepCheck check{};
  EXPECT_TRUE(stepCheckStatus(twoInstructions(), check, 3).ok());
}

TEST(StepCheckTest, BadTokenReadsAsTheCpuExecutorsError) {
  Program program = twoInstructions();
  StepCheck check = badId(StepCheck::BadToken, 0, 0, 99, 4);
  absl::Status status = stepCheckStatus(program, check, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  // Dispatch.cpp's words, after the step (stepNumber: 3).
  EXPECT_EQ(status.message(),
            absl::StrCat("step 3: ", describeInstruction(program, 0),
                         ": token id 99 at ",
                         describeIdPosition(program.buffers[0], 4),
                         " is outside the embedding table [0, 64)"));
}

TEST(StepCheckTest, BadTargetReadsAsCheckTargets) {
  Program program = twoInstructions();
  int32_t ids[6] = {1, 2, -100, 70, 3, 80};
  absl::StatusOr<int64_t> cpu =
      engine::checkTargets(program, 1, program.buffers[1], ids, 64);
  ASSERT_FALSE(cpu.ok());
  StepCheck check = badId(StepCheck::BadTarget, 1, 1, 70, 3);
  absl::Status status = stepCheckStatus(program, check, 0);
  EXPECT_EQ(status, atStep(0, cpu.status()));
}

TEST(StepCheckTest, NonFiniteLossAndNorm) {
  Program program = twoInstructions();
  StepCheck check{};
  check.kind = StepCheck::NonFiniteLoss;
  check.value = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(stepCheckStatus(program, check, 4).message(),
            "step 5: loss is not finite (nan)");
  check.kind = StepCheck::NonFiniteNorm;
  check.value = std::numeric_limits<float>::infinity();
  EXPECT_EQ(stepCheckStatus(program, check, 4).message(),
            "step 5: gradient norm is not finite (inf)");
}

TEST(StepCheckTest, GarbledRecordIsAnInternalError) {
  Program program = twoInstructions();
  StepCheck check{};
  check.kind = 17;
  EXPECT_EQ(stepCheckStatus(program, check, 0).code(),
            absl::StatusCode::kInternal);
  check.kind = StepCheck::BadToken;
  check.instruction = 5;
  absl::Status status = stepCheckStatus(program, check, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("instruction 5"));
  check.instruction = 0;
  check.idsBuffer = 9;
  EXPECT_EQ(stepCheckStatus(program, check, 0).code(),
            absl::StatusCode::kInternal);
}

} // namespace
} // namespace moe::rt::cuda
