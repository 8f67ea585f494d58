//===- DTypeTest.cpp - typed buffers (artifact 3.0) -----------------------===//
//
// The dtype table against the schema, buffer sizes and arena ranges from the
// dtype, typed buffers through the writer and reader, and the load-time
// refusal of a dtype no kernel takes.
//
//===----------------------------------------------------------------------===//

#include "ExpectVerify.h"

#include "moe/Runtime/Artifact/Program_generated.h"
#include "moe/Runtime/DType.h"

namespace moe::rt {
namespace {

using testing::buffer;
using testing::bufferNamed;
using testing::expectError;
using testing::expectValid;
using testing::instruction;
using testing::makeTinyProgram;
using testing::ProgramBuilder;
using testing::serialize;

TEST(DTypeTest, TableMatchesTheSchema) {
  ASSERT_EQ(static_cast<int>(artifact::DType::MAX) + 1, kNumDTypes);
  for (const DTypeInfo &info : kDTypes) {
    SCOPED_TRACE(info.name);
    // The schema's names are the table's, upper case, without "FN".
    std::string schemaName =
        artifact::EnumNameDType(static_cast<artifact::DType>(info.dtype));
    std::string name = info.name;
    for (char &c : name)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.size() > 2 && name.substr(name.size() - 2) == "FN")
      name.resize(name.size() - 2);
    EXPECT_EQ(schemaName, name);
    EXPECT_EQ(dtypeFromSafetensors(info.safetensors), info.dtype);
  }
}

TEST(DTypeTest, SizesNamesAndKinds) {
  struct Expected {
    DType dtype;
    uint64_t bytes;
    const char *name, *safetensors;
    bool isFloat;
  };
  for (const Expected &e : std::initializer_list<Expected>{
           {DType::F32, 4, "f32", "F32", true},
           {DType::BF16, 2, "bf16", "BF16", true},
           {DType::F16, 2, "f16", "F16", true},
           {DType::F8E4M3, 1, "f8E4M3FN", "F8_E4M3", true},
           {DType::F8E5M2, 1, "f8E5M2", "F8_E5M2", true},
           {DType::I32, 4, "i32", "I32", false},
           {DType::I64, 8, "i64", "I64", false}}) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(dtypeBytes(e.dtype), e.bytes);
    EXPECT_EQ(dtypeName(e.dtype), e.name);
    EXPECT_STREQ(safetensorsName(e.dtype), e.safetensors);
    EXPECT_EQ(dtypeInfo(e.dtype)->isFloat, e.isFloat);
    EXPECT_EQ(kArenaAlignment % e.bytes, 0u);
  }
  EXPECT_EQ(dtypeInfo(static_cast<DType>(7)), nullptr);
  EXPECT_EQ(dtypeName(static_cast<DType>(7)), "dtype 7");
  EXPECT_EQ(dtypeFromSafetensors("F64"), std::nullopt);
  EXPECT_EQ(knownDTypeNames(), "f32, i32, bf16, f16, f8E4M3FN, f8E5M2, i64");
}

TEST(DTypeTest, BufferSizeIsElementsTimesTheDTypeSize) {
  Buffer b;
  b.shape = {3, 5};
  const std::pair<DType, uint64_t> sizes[] = {
      {DType::F32, 60}, {DType::I32, 60},   {DType::BF16, 30}, {DType::F16, 30},
      {DType::F8E4M3, 15}, {DType::F8E5M2, 15}, {DType::I64, 120}};
  for (auto [dtype, bytes] : sizes) {
    b.dtype = dtype;
    EXPECT_EQ(b.sizeInBytes(), bytes) << dtypeName(dtype);
  }
}

/// The tiny program plus temporaries of the new dtypes, which no
/// instruction touches (so no kernel needs to take them).
Program withTypedTemporaries() {
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  b.temporary("bf16", {3, 5}, DType::BF16);
  b.temporary("f16", {7}, DType::F16);
  b.temporary("e4m3", {5, 3}, DType::F8E4M3);
  b.temporary("e5m2", {1}, DType::F8E5M2);
  b.temporary("i64", {2, 3}, DType::I64);
  return program;
}

TEST(DTypeTest, TypedTemporariesGetTheirSizeAndAlignedOffsets) {
  Program program = withTypedTemporaries();
  expectValid(program);
  // Each takes its own bytes, rounded up to the arena alignment.
  const std::pair<const char *, uint64_t> sizes[] = {
      {"bf16", 30}, {"f16", 14}, {"e4m3", 15}, {"e5m2", 1}, {"i64", 48}};
  uint64_t offset = buffer(program, "bf16").offset;
  for (auto [name, bytes] : sizes) {
    SCOPED_TRACE(name);
    const Buffer &typed = buffer(program, name);
    EXPECT_EQ(typed.sizeInBytes(), bytes);
    EXPECT_EQ(typed.offset, offset);
    EXPECT_EQ(typed.offset % kArenaAlignment, 0u);
    offset += kArenaAlignment;
  }
  EXPECT_EQ(program.arenaBytes, offset);
}

TEST(DTypeTest, TypedBuffersRoundTrip) {
  Program program = withTypedTemporaries();
  std::vector<uint8_t> bytes = serialize(program);
  absl::StatusOr<Program> read =
      parseArtifact(bytes.data(), bytes.size(), "typed.moebin");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->buffers.size(), program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    EXPECT_EQ(read->buffers[i].dtype, program.buffers[i].dtype) << i;
    EXPECT_EQ(read->buffers[i].sizeInBytes(), program.buffers[i].sizeInBytes());
  }
}

TEST(DTypeTest, ArenaRangeIsCheckedAtTheDTypesSize) {
  // 32 bf16 elements are 64 bytes: they fit in the arena's last 64 bytes,
  // where 32 f32 elements (128 bytes) do not.
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  uint32_t last = b.temporary("last", {32}, DType::BF16);
  EXPECT_EQ(program.arenaBytes - program.buffers[last].offset, 64u);
  expectValid(program);
  program.buffers[last].dtype = DType::F32;
  expectError(program, {"'last': arena range", "+ 128) exceeds the arena"});
}

TEST(DTypeTest, ElementCountBoundDependsOnTheDType) {
  // 2^61 elements fit in int64 as bytes at 2 bytes each (the next check
  // refuses them), not at 8.
  Program program = makeTinyProgram();
  buffer(program, "h").shape = {int64_t(1) << 30, int64_t(1) << 30, 2};
  buffer(program, "h").dtype = DType::BF16;
  expectError(program, {"'h': shape [1073741824, 1073741824, 2] has more "
                        "rows"});
  buffer(program, "h").dtype = DType::I64;
  expectError(program, {"'h': element count of shape", "overflows"});
}

TEST(DTypeTest, KernelOperandOfAnotherDTypeIsRefusedAtLoad) {
  // Activations may be bf16 (mixed precision), but what the op table pins
  // to fp32 (the gradients the optimizer reads, losses, router
  // probabilities) is refused in bf16 when the artifact loads, naming the
  // instruction.
  Program program = makeTinyProgram();
  uint32_t x = ProgramBuilder(program).temporary("x", {256, 64}, DType::BF16);
  instruction(program, Opcode::GlobalNorm).operands[0] = x;
  expectError(program, {"(GlobalNorm): operand 0 (buffer 26 'x') "
                        "has dtype bf16, expected f32"});
  program = makeTinyProgram();
  buffer(program, "h").dtype = DType::I64;
  expectError(program,
              {"(Embedding): result 0 (buffer", "'h') has dtype i64, "
               "expected f32 or bf16"});
}

TEST(DTypeTest, NonF32ParameterIsRefusedAtLoad) {
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight").dtype = DType::BF16;
  expectError(program,
              {"'lm_head.weight': a parameter must be f32, found bf16"});
}

TEST(DTypeTest, UnknownDTypeNamesTheBufferAndTheKnownOnes) {
  Program program = makeTinyProgram();
  buffer(program, "logits").dtype = static_cast<DType>(42);
  expectError(program, {"'logits': unknown dtype 42 (known: f32, i32, bf16, "
                        "f16, f8E4M3FN, f8E5M2, i64)"});
}

} // namespace
} // namespace moe::rt
