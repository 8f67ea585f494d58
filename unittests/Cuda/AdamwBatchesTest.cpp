//===- AdamwBatchesTest.cpp - AdamW instructions one launch updates -------===//
#include "../../lib/Runtime/Cuda/AdamwBatches.h"

#include "gtest/gtest.h"

namespace moe::rt::cuda {
namespace {

// Buffers: 0 lr, 1 grad scale, 2 step, 3 another lr; then per parameter p
// four buffers from 4 + 4p: param, grad, exp_avg, exp_avg_sq.
constexpr uint32_t kLr = 0, kScale = 1, kStep = 2, kOtherLr = 3;

Instruction adamw(uint32_t parameter, uint32_t lr = kLr, float beta1 = 0.9f,
                  float weightDecay = 0.1f) {
  uint32_t base = 4 + 4 * parameter;
  Instruction inst;
  inst.opcode = Opcode::AdamW;
  inst.operands = {base, base + 1, base + 2, base + 3, lr, kScale, kStep};
  inst.floatAttrs = {beta1, 0.95f, 1e-8f, weightDecay};
  return inst;
}

Instruction other() {
  Instruction inst;
  inst.opcode = Opcode::GlobalNorm;
  return inst;
}

std::vector<int64_t> batchesOf(std::vector<Instruction> instructions) {
  Program program;
  program.instructions = std::move(instructions);
  return adamwBatches(program);
}

TEST(AdamwBatchesTest, ConsecutiveUpdatesWithSharedScalarsBatch) {
  // Weight decays differ per tensor; that stays in the batch.
  EXPECT_EQ(batchesOf({other(), adamw(0), adamw(1, kLr, 0.9f, 0.0f), adamw(2)}),
            (std::vector<int64_t>{-1, 1, 1, 1}));
}

TEST(AdamwBatchesTest, AnUpdateAloneIsNotABatch) {
  EXPECT_EQ(batchesOf({adamw(0), other(), adamw(1)}),
            (std::vector<int64_t>{-1, -1, -1}));
}

TEST(AdamwBatchesTest, OtherScalarsOrInstructionsSplitBatches) {
  EXPECT_EQ(
      batchesOf({adamw(0), adamw(1), adamw(2, kOtherLr), adamw(3, kOtherLr),
                 adamw(4, kOtherLr, 0.8f), other(), adamw(5), adamw(6)}),
      (std::vector<int64_t>{0, 0, 2, 2, -1, -1, 6, 6}));
}

TEST(AdamwBatchesTest, UpdatesOfOneBufferDoNotBatch) {
  // The second update of parameter 0 must see the first's result.
  EXPECT_EQ(batchesOf({adamw(0), adamw(1), adamw(0), adamw(2)}),
            (std::vector<int64_t>{0, 0, 2, 2}));
}

} // namespace
} // namespace moe::rt::cuda
