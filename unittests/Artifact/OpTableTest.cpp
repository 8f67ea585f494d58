//===- OpTableTest.cpp - the generated op table, views and builders -------===//
//
// What the writer's builders encode, the views read back by name, in every
// layout an opcode's optional attributes allow; and the table's own
// invariants the load-time check relies on.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Artifact/Disassemble.h"
#include "moe/Runtime/Artifact/OpTable.h"
#include "moe/Runtime/Artifact/OpViews.h"

#include <gtest/gtest.h>

#include <set>

namespace moe::rt {
namespace {

Instruction instructionOf(const ops::EncodedAttrs &attrs,
                          std::vector<uint32_t> operands,
                          std::vector<uint32_t> results) {
  Instruction instruction;
  instruction.opcode = attrs.opcode;
  instruction.intAttrs = attrs.ints;
  instruction.floatAttrs = attrs.floats;
  instruction.operands = std::move(operands);
  instruction.results = std::move(results);
  return instruction;
}

TEST(OpTableTest, TableIsInOpcodeOrderWithDistinctLayouts) {
  std::set<uint64_t> layouts;
  for (int value = 0; value < kNumOpcodes; ++value) {
    const ops::OpInfo &info = ops::kOpTable[value];
    EXPECT_EQ(static_cast<int>(info.opcode), value) << info.name;
    EXPECT_STREQ(opcodeName(info.opcode), info.name);
    EXPECT_TRUE(layouts.insert(info.layoutHash).second) << info.name;
  }
}

// The experts' group and FP8 recipe are both optional: four layouts of
// their int attributes, each read back by name.
TEST(OpTableTest, ExpertsAttributesRoundTripInEveryLayout) {
  std::vector<uint32_t> operands = {0, 1, 2, 3, 4, 5};
  for (std::optional<int64_t> group : {std::optional<int64_t>(), std::optional<int64_t>(2)})
    for (bool fp8 : {false, true}) {
      std::optional<ops::Fp8Attrs> recipe;
      if (fp8)
        recipe = ops::Fp8Attrs{Fp8Scaling::Blockwise, 64, true};
      Instruction instruction =
          instructionOf(ops::buildExperts(group, recipe), operands, {6});
      ASSERT_TRUE(ops::findAttrLayout(instruction).has_value());
      ops::ExpertsView op(instruction);
      EXPECT_EQ(op.group(), group);
      EXPECT_EQ(op.fp8Scaling().has_value(), fp8);
      if (fp8) {
        EXPECT_EQ(*op.fp8Scaling(), Fp8Scaling::Blockwise);
        EXPECT_EQ(*op.fp8Block(), 64);
        EXPECT_TRUE(*op.fp8Dispatch());
      }
      EXPECT_EQ(op.w2(), 5u);
      EXPECT_FALSE(op.amaxHistory().has_value());
      EXPECT_EQ(ops::communicatesOverGroup(instruction), group.has_value());
    }
}

TEST(OpTableTest, PerOperandAttributes) {
  Instruction sum =
      instructionOf(ops::buildWeightedSum({1.0f, 0.5f}), {3, 4}, {5});
  ops::WeightedSumView weighted(sum);
  EXPECT_EQ(weighted.scalars(), (std::vector<uint32_t>{3, 4}));
  EXPECT_EQ(weighted.coefficients(), (std::vector<float>{1.0f, 0.5f}));
  Instruction norm = instructionOf(ops::buildGlobalNorm({}), {1, 2}, {3});
  EXPECT_TRUE(ops::GlobalNormView(norm).groups().empty());
  EXPECT_FALSE(ops::communicatesOverGroup(norm));
  norm = instructionOf(ops::buildGlobalNorm({-1, 0}), {1, 2}, {3});
  EXPECT_EQ(ops::GlobalNormView(norm).groups(), (std::vector<int64_t>{-1, 0}));
  EXPECT_TRUE(ops::communicatesOverGroup(norm));
  // One per operand or none: another count has no layout.
  norm.intAttrs = {0};
  EXPECT_FALSE(ops::findAttrLayout(norm).has_value());
}

TEST(OpTableTest, SliceTakesItsBlockWithoutCommunicating) {
  Instruction slice = instructionOf(ops::buildSlice(1, 2), {0}, {1});
  EXPECT_EQ(ops::SliceView(slice).group(), 1);
  EXPECT_EQ(ops::SliceView(slice).dim(), 2);
  EXPECT_FALSE(ops::communicatesOverGroup(slice));
  Instruction gather = instructionOf(ops::buildAllGather(1, 2), {0}, {1});
  EXPECT_TRUE(ops::communicatesOverGroup(gather));
}

TEST(OpTableTest, GroupsAnInstructionNames) {
  using Groups = std::vector<int64_t>;
  // The per-operand groups without "none", an optional group when present,
  // a plain one, and none for an opcode without group attributes.
  EXPECT_EQ(ops::groupsOf(instructionOf(ops::buildGlobalNorm({-1, 0, 2}),
                                        {1, 2, 3}, {4})),
            (Groups{0, 2}));
  EXPECT_EQ(ops::groupsOf(instructionOf(ops::buildGlobalNorm({}), {1}, {2})),
            Groups{});
  EXPECT_EQ(ops::groupsOf(instructionOf(ops::buildExperts(3, std::nullopt),
                                        {0, 1, 2, 3, 4, 5}, {6})),
            Groups{3});
  EXPECT_EQ(
      ops::groupsOf(instructionOf(ops::buildExperts(std::nullopt, std::nullopt),
                                  {0, 1, 2, 3, 4, 5}, {6})),
      Groups{});
  EXPECT_EQ(ops::groupsOf(
                instructionOf(ops::buildReduceBucket(1, true), {0, 1}, {2, 3})),
            Groups{1});
  EXPECT_EQ(ops::groupsOf(instructionOf(ops::buildAdd(), {0, 1}, {2})),
            Groups{});
}

TEST(OpTableTest, DisassemblesWithNames) {
  EXPECT_EQ(disassembleInstruction(instructionOf(
                ops::buildAttention(4, 2, std::nullopt, std::nullopt), {1, 2, 3}, {4, 5})),
            "Attention(q: %1, k: %2, v: %3) -> (out: %4, lse: %5) {heads = 4, "
            "kv_heads = 2}");
  EXPECT_EQ(disassembleInstruction(instructionOf(
                ops::buildExpertsGrad(
                    0, ops::Fp8Attrs{Fp8Scaling::Delayed, 128, false}),
                {0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12})),
            "ExpertsGrad(dy: %0, x: %1, weights: %2, indices: %3, w1: %4, "
            "w3: %5, w2: %6, amax_history: %7) -> (dx: %8, dweights: %9, "
            "dw1: %10, dw3: %11, dw2: %12) {group = 0, fp8_scaling = "
            "delayed, fp8_block = 128, fp8_dispatch = false}");
  EXPECT_EQ(disassembleInstruction(
                instructionOf(ops::buildGlobalNorm({-1, 1}), {1, 2}, {3})),
            "GlobalNorm(grads: %1, %2) -> (norm: %3) {group = [none, 1]}");
}

} // namespace
} // namespace moe::rt
