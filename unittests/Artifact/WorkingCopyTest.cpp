//===- WorkingCopyTest.cpp - mixed precision in the artifact (3.1) --------===//
//
// BF16 working copies of master weights and AdamW's working operand: a
// valid mixed-precision program, its round trip through the writer and
// reader, and one test per rule the verifier enforces on them.
//
//===----------------------------------------------------------------------===//

#include "ExpectVerify.h"

#include "moe/Runtime/Artifact/OpViews.h"

namespace moe::rt {
namespace {

using testing::buffer;
using testing::bufferNamed;
using testing::expectError;
using testing::expectValid;
using testing::instruction;
using testing::makeBf16TinyProgram;
using testing::serialize;

TEST(WorkingCopyTest, Bf16TinyProgramIsValid) {
  Program program = makeBf16TinyProgram();
  expectValid(program);
  const Buffer &copy = buffer(program, "lm_head.weight.bf16");
  EXPECT_EQ(copy.kind, BufferKind::WorkingCopy);
  EXPECT_EQ(copy.master, bufferNamed(program, "lm_head.weight"));
}

TEST(WorkingCopyTest, RoundTripsThroughTheWriterAndReader) {
  Program program = makeBf16TinyProgram();
  std::vector<uint8_t> bytes = serialize(program);
  absl::StatusOr<Program> read =
      parseArtifact(bytes.data(), bytes.size(), "bf16.moebin");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->buffers.size(), program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    SCOPED_TRACE(program.buffers[i].name);
    EXPECT_EQ(read->buffers[i].kind, program.buffers[i].kind);
    EXPECT_EQ(read->buffers[i].dtype, program.buffers[i].dtype);
    EXPECT_EQ(read->buffers[i].master, program.buffers[i].master);
  }
  const Instruction &adamw = instruction(*read, Opcode::AdamW, 2);
  ASSERT_EQ(adamw.operands.size(), ops::AdamWView::kWorkingOperand + 1);
  EXPECT_EQ(adamw.operands[ops::AdamWView::kWorkingOperand],
            bufferNamed(*read, "lm_head.weight.bf16"));
}

TEST(WorkingCopyTest, MustBeBf16) {
  Program program = makeBf16TinyProgram();
  buffer(program, "lm_head.weight.bf16").dtype = DType::F32;
  expectError(program, {"'lm_head.weight.bf16'",
                        "a working copy must be bf16, found f32"});
}

TEST(WorkingCopyTest, MasterMustExist) {
  Program program = makeBf16TinyProgram();
  buffer(program, "lm_head.weight.bf16").master = 1000;
  expectError(program, {"'lm_head.weight.bf16'", "the master buffer 1000 is "
                        "out of range"});
}

TEST(WorkingCopyTest, MasterMustBeAParameter) {
  Program program = makeBf16TinyProgram();
  buffer(program, "lm_head.weight.bf16").master =
      bufferNamed(program, "lm_head.weight.exp_avg");
  expectError(program, {"'lm_head.weight.bf16'", "must be a parameter, "
                        "found an optimizer state"});
}

TEST(WorkingCopyTest, MasterMustHaveTheSameShape) {
  Program program = makeBf16TinyProgram();
  buffer(program, "model.norm.weight.bf16").master =
      bufferNamed(program, "lm_head.weight");
  expectError(program, {"'model.norm.weight.bf16'", "differs from its master"});
}

TEST(WorkingCopyTest, AMasterHasOneWorkingCopy) {
  Program program = makeBf16TinyProgram();
  testing::ProgramBuilder(program).workingCopy(
      bufferNamed(program, "lm_head.weight"));
  expectError(program, {"already has the working copy"});
}

TEST(WorkingCopyTest, OnlyAWorkingCopyHasAMaster) {
  Program program = makeBf16TinyProgram();
  buffer(program, "lm_head.weight.exp_avg").master = 1;
  expectError(program, {"'lm_head.weight.exp_avg'", "has a master",
                        "which only a working copy has"});
}

TEST(WorkingCopyTest, IsNeverInitialised) {
  Program program = makeBf16TinyProgram();
  buffer(program, "lm_head.weight.bf16").init = Init::Normal;
  buffer(program, "lm_head.weight.bf16").initStd = 0.02f;
  expectError(program, {"'lm_head.weight.bf16'", "init 'normal' is not valid "
                        "for a working copy"});
}

TEST(WorkingCopyTest, AdamWWorkingOperandIsAWorkingCopy) {
  Program program = makeBf16TinyProgram();
  Instruction &adamw = instruction(program, Opcode::AdamW, 2);
  adamw.operands[ops::AdamWView::kWorkingOperand] =
      bufferNamed(program, "lm_head.weight.exp_avg");
  expectError(program, {"(AdamW)", "operand 7"});
}

TEST(WorkingCopyTest, AdamWWorkingOperandIsItsParamsCopy) {
  Program program = makeBf16TinyProgram();
  // The embedding's copy has the head's shape, so only the master differs.
  Instruction &adamw = instruction(program, Opcode::AdamW, 2);
  adamw.operands[ops::AdamWView::kWorkingOperand] =
      bufferNamed(program, "model.embed_tokens.weight.bf16");
  expectError(program, {"(AdamW)", "is the working copy of",
                        "'model.embed_tokens.weight'", "not of operand 0",
                        "'lm_head.weight'"});
}

TEST(WorkingCopyTest, CastToItsOwnDTypeIsRefused) {
  Program program = makeBf16TinyProgram();
  testing::ProgramBuilder b(program);
  uint32_t x = bufferNamed(program, "logits");
  uint32_t y = b.temporary("logits32", {2, 4, 8}, DType::F32);
  b.emit(Opcode::Cast, {x}, {y});
  expectValid(program);
  program.buffers[y].dtype = DType::BF16;
  expectError(program, {"(Cast)", "casts", "to its own dtype bf16"});
}

} // namespace
} // namespace moe::rt
