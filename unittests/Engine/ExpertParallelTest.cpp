//===- ExpertParallelTest.cpp - expert parallelism on one rank ------------===//
//
// A group of one still takes the expert-parallel path (sort, header and row
// exchanges, results back), so these run it in one process; the MPI binary
// (MeshExecutorTest.cpp) runs the same checks on real ranks.
//
//===----------------------------------------------------------------------===//

#include "ExpertParallelChecks.h"

#include "moe/Runtime/Engine/Executor.h"

#include "gtest/gtest.h"

#include <cstring>

namespace moe::rt {
namespace {

using testing::ExpertParallelConfig;

TEST(ExpertParallelTest, GroupOfOneEqualsThePlainKernelsBitwise) {
  // Top-3: with three outputs per token the order they are added in shows
  // in the bits, so this also pins the kernels' expert order.
  testing::checkExpertParallelStep({1, 1, /*localExperts=*/4, /*topK=*/3},
                                   nullptr);
  testing::checkExpertParallelStep({1, 1, 5, 1}, nullptr);
}

TEST(ExpertParallelTest, Bf16RowsEqualTheKernelsRoundingEachAssignment) {
  testing::checkExpertParallelStep(
      {1, 1, 4, 3, /*capacityFactor=*/0.0f, /*bf16=*/true}, nullptr);
}

TEST(ExpertParallelTest, DroppedSlotsContributeNothing) {
  testing::checkExpertParallelStep({1, 1, 4, 3, /*capacityFactor=*/0.6f},
                                   nullptr);
}

TEST(ExpertParallelTest, DelayedFp8KeepsAnAmaxHistory) {
  testing::checkFp8AmaxHistoryCopies({1, 1, 4, 3}, nullptr);
}

TEST(ExpertParallelTest, BadExpertIdNamesTheInstructionAndToken) {
  testing::checkExpertParallelBadIds({1, 1, 4, 2}, nullptr);
}

TEST(ExpertParallelTest, WithoutAGroupTheProgramIsSingleRank) {
  // The same instructions without the group attribute: the plain kernels,
  // and the same results as the group of one.
  Program program = testing::makeExpertParallelProgram({1, 1, 4, 3});
  absl::StatusOr<std::unique_ptr<Executor>> parallel =
      Executor::create(program);
  for (Instruction &instruction : program.instructions)
    if (instruction.opcode == Opcode::Experts ||
        instruction.opcode == Opcode::ExpertsGrad)
      instruction.intAttrs.clear();
  absl::StatusOr<std::unique_ptr<Executor>> plain = Executor::create(program);
  ASSERT_TRUE(parallel.ok()) << parallel.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::vector<int32_t> tokens, targets;
  for (int32_t t = 0; t < (*plain)->tokensPerStep(); ++t) {
    tokens.push_back((t * 3 + 1) % testing::ExpertParallelSizes::kVocab);
    targets.push_back(t % testing::ExpertParallelSizes::kHidden);
  }
  for (Executor *executor : {parallel->get(), plain->get()}) {
    executor->initialize();
    absl::StatusOr<StepResult> result =
        executor->runStep(tokens.data(), targets.data(), 0);
    ASSERT_TRUE(result.ok()) << result.status();
  }
  for (const char *name : {"y", "dx", "dweights", "dw1", "dw3", "dw2"}) {
    uint32_t b = testing::bufferNamed(program, name);
    int64_t count = program.buffers[b].numElements();
    EXPECT_EQ(std::memcmp((*parallel)->data(b), (*plain)->data(b),
                          count * sizeof(float)),
              0)
        << name;
  }
}

} // namespace
} // namespace moe::rt
