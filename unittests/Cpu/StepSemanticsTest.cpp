//===- StepSemanticsTest.cpp - the scalar rules both backends share -------===//
#include "moe/Runtime/StepSemantics.h"

#include "gtest/gtest.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

using namespace moe::rt::semantics;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(StepSemanticsTest, IsFinite) {
  EXPECT_TRUE(isFinite(0.0f));
  EXPECT_TRUE(isFinite(-FLT_MAX));
  EXPECT_FALSE(isFinite(kInf));
  EXPECT_FALSE(isFinite(-kInf));
  EXPECT_FALSE(isFinite(kNaN));
}

// PyTorch's clip_grad_norm_ in fp32.
TEST(StepSemanticsTest, ClipCoefficient) {
  EXPECT_EQ(clipCoefficient(1.0f, 4.0f), 1.0f / (4.0f + 1e-6f));
  EXPECT_EQ(clipCoefficient(1.0f, 0.5f), 1.0f);
  EXPECT_EQ(clipCoefficient(0.0f, 4.0f), 1.0f); // clipping off
  EXPECT_EQ(clipCoefficient(-1.0f, 4.0f), 1.0f);
  EXPECT_EQ(clipCoefficient(1.0f, kNaN), 1.0f);
}

// In double, in operand order: the two halves of 2^-23 add up to one fp32
// ulp of 1, where an fp32 sum would round each away (ties to even).
TEST(StepSemanticsTest, WeightedSumInDouble) {
  float weights[] = {1.0f, 0.5f, 0.5f};
  float values[] = {1.0f, std::ldexp(1.0f, -23), std::ldexp(1.0f, -23)};
  EXPECT_EQ(weightedSum(weights, values, 3), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(weightedSum(weights, values, 0), 0.0f);
}

TEST(StepSemanticsTest, NormFromSquares) {
  double squares[] = {9.0, 16.0};
  EXPECT_EQ(normFromSquares(squares, 2), 5.0f);
}

TEST(StepSemanticsTest, Fp8Scale) {
  EXPECT_EQ(fp8MaxFinite(0), 448.0f);
  EXPECT_EQ(fp8MaxFinite(1), 57344.0f);
  EXPECT_EQ(fp8Scale(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(fp8Scale(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(fp8Scale(kNaN, 448.0f), 1.0f);
  EXPECT_EQ(fp8Scale(kInf, 448.0f), 1.0f);
  // A tiny amax would overflow the scale.
  EXPECT_EQ(fp8Scale(1e-44f, 57344.0f), FLT_MAX);
}

TEST(StepSemanticsTest, DelayedAmaxAndHistory) {
  // Slot 0 is this step; the past steps' largest is used when positive.
  std::vector<float> history = {0.0f, 3.0f, 5.0f, 4.0f};
  EXPECT_EQ(delayedAmax(history.data(), 4, 7.0f), 5.0f);
  std::vector<float> fresh = {0.0f, 0.0f, 0.0f};
  EXPECT_EQ(delayedAmax(fresh.data(), 3, 7.0f), 7.0f);
  recordAmax(history.data(), 2.0f);
  recordAmax(history.data(), 1.0f);
  EXPECT_EQ(history[0], 2.0f);
  rollAmaxHistory(history.data(), 4);
  EXPECT_EQ(history, (std::vector<float>{0.0f, 2.0f, 3.0f, 5.0f}));
  // A NaN amax stays, so the history says the step went wrong.
  recordAmax(history.data(), kNaN);
  EXPECT_TRUE(std::isnan(history[0]));
  // One slot: nothing to move, its value kept.
  float one[] = {6.0f};
  rollAmaxHistory(one, 1);
  EXPECT_EQ(one[0], 6.0f);
}

// [outer, parts, chunk] around dim 1 of a [2, 3, 4] block: outer 2,
// chunk 12; chunk (o, r) of 3 parts.
TEST(StepSemanticsTest, CollectiveBlocks) {
  int64_t block[] = {2, 3, 4};
  CollectiveBlocks blocks = blocksAround(block, 3, 1);
  EXPECT_EQ(blocks.outer, 2);
  EXPECT_EQ(blocks.chunk, 12);
  EXPECT_EQ(stridedOffset(blocks, 3, 1, 2), (1 * 3 + 2) * 12);
  EXPECT_EQ(packedOffset(blocks, 1, 2), 2 * 24 + 12);
  CollectiveBlocks whole = blocksAround(block, 3, 0);
  EXPECT_EQ(whole.outer, 1);
  EXPECT_EQ(whole.chunk, 24);
}

// Context parallelism's load-balanced split of 8 rows over cp = 2: rank 0
// holds chunks 0 and 3, rank 1 chunks 1 and 2; with tp's split inside
// (4 parts), each rank's pair is cut in two.
TEST(StepSemanticsTest, BalancedRuns) {
  SequenceRuns r0 = balancedRuns(8, 2, 2, 0);
  ASSERT_EQ(r0.count, 2);
  EXPECT_EQ(r0.local[0], 0);
  EXPECT_EQ(r0.whole[0], 0);
  EXPECT_EQ(r0.length[0], 2);
  EXPECT_EQ(r0.local[1], 2);
  EXPECT_EQ(r0.whole[1], 6);
  EXPECT_EQ(r0.length[1], 2);
  SequenceRuns r1 = balancedRuns(8, 2, 2, 1);
  ASSERT_EQ(r1.count, 2);
  EXPECT_EQ(r1.whole[0], 2);
  EXPECT_EQ(r1.whole[1], 4);
  // cp = 2 x 2 inner parts: blocks are chunks 0, 3, 1, 2.
  int64_t expected[] = {0, 6, 2, 4};
  for (int64_t g = 0; g < 4; ++g) {
    SequenceRuns runs = balancedRuns(8, 2, 4, g);
    ASSERT_EQ(runs.count, 1);
    EXPECT_EQ(runs.local[0], 0);
    EXPECT_EQ(runs.whole[0], expected[g]);
    EXPECT_EQ(runs.length[0], 2);
  }
  // Without cp the blocks are contiguous.
  SequenceRuns plain = blockRuns(8, 1, 4, 3);
  ASSERT_EQ(plain.count, 1);
  EXPECT_EQ(plain.whole[0], 6);
  EXPECT_EQ(plain.length[0], 2);
}

// Every split covers every row exactly once, the runs filling each block
// in order; a block may straddle the two chunks of its rank's pair.
TEST(StepSemanticsTest, BalancedRunsPartitionTheSequence) {
  for (int64_t cp : {2, 3, 4})
    for (int64_t inner : {1, 2, 3, 5}) {
      int64_t parts = cp * inner, whole = 2 * cp * inner * 7;
      std::vector<int> seen(whole, 0);
      for (int64_t g = 0; g < parts; ++g) {
        SequenceRuns runs = balancedRuns(whole, cp, parts, g);
        int64_t filled = 0;
        for (int i = 0; i < runs.count; ++i) {
          EXPECT_EQ(runs.local[i], filled);
          filled += runs.length[i];
          for (int64_t j = 0; j < runs.length[i]; ++j)
            ++seen[runs.whole[i] + j];
        }
        EXPECT_EQ(filled, whole / parts);
      }
      for (int64_t i = 0; i < whole; ++i)
        EXPECT_EQ(seen[i], 1)
            << "row " << i << " of cp " << cp << " x " << inner;
    }
}

} // namespace
