//===- VerifierTest.cpp - semantic checks of a decoded program ------------===//
//
// Each test breaks one rule of a valid hand-built program and checks that
// verifyProgram names the offending buffer or instruction.
//
//===----------------------------------------------------------------------===//

#include "ExpectVerify.h"

#include "moe/Runtime/Artifact/Program_generated.h"

#include <cmath>

namespace moe::rt {
namespace {

using testing::buffer;
using testing::bufferNamed;
using testing::expectError;
using testing::expectValid;
using testing::instruction;
using testing::instructionWith;
using testing::makeMoeProgram;
using testing::makeScoredRouterProgram;
using testing::makeTinyProgram;
using testing::MoeConfig;

TEST(VerifierTest, OpcodeNamesAreTheSchemas) {
  for (int i = 0; i < kNumOpcodes; ++i)
    EXPECT_STREQ(opcodeName(static_cast<Opcode>(i)),
                 artifact::EnumNameOpcode(static_cast<artifact::Opcode>(i)));
  EXPECT_STREQ(opcodeName(static_cast<Opcode>(kNumOpcodes)),
               "<invalid opcode>");
}

TEST(VerifierTest, NumElements) {
  Buffer buffer;
  EXPECT_EQ(buffer.numElements(), 1); // a scalar
  buffer.shape = {2, 3, 4};
  EXPECT_EQ(buffer.numElements(), 24);
  EXPECT_EQ(buffer.sizeInBytes(), 96u);
  buffer.shape = {5, 0};
  EXPECT_EQ(buffer.numElements(), 0);
}

//===----------------------------------------------------------------------===//
// Valid programs
//===----------------------------------------------------------------------===//

TEST(VerifierTest, TinyProgramIsValid) { expectValid(makeTinyProgram()); }
TEST(VerifierTest, MoeProgramIsValid) { expectValid(makeMoeProgram()); }

TEST(VerifierTest, MoeProgramWithCapacityAndRank2ActivationsIsValid) {
  testing::MoeConfig config;
  config.capacityFactor = 1.25f;
  config.kvHeads = 2;
  expectValid(makeMoeProgram(config));
}

TEST(VerifierTest, ReusingTheArenaOfADeadTemporaryIsValid) {
  Program program = makeTinyProgram();
  // dlogits is last read by LinearGradWeight; dembed is written later.
  buffer(program, "dembed").offset = buffer(program, "dlogits").offset;
  expectValid(program);
}

TEST(VerifierTest, InPlaceHandoverIsValidForAdd) {
  Program program = makeMoeProgram();
  // The Add reads dn2_experts for the last time and may overwrite it.
  buffer(program, "dn2").offset = buffer(program, "dn2_experts").offset;
  expectValid(program);
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

TEST(VerifierTest, NegativeDimension) {
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight").shape = {8, -4};
  expectError(program, {"buffer 5 'lm_head.weight': dimension 1 of shape "
                        "[8, -4] is negative"});
}

TEST(VerifierTest, ElementCountOverflow) {
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight").shape = {int64_t(1) << 40, int64_t(1)
                                                                   << 40};
  expectError(program,
              {"buffer 5 'lm_head.weight': element count", "overflows"});
}

TEST(VerifierTest, TemporaryOutsideTheArena) {
  Program program = makeTinyProgram();
  buffer(program, "logits").offset = program.arenaBytes;
  expectError(program, {"'logits': arena range", "exceeds the arena of"});
}

TEST(VerifierTest, HugeOffsetDoesNotWrapAround) {
  Program program = makeTinyProgram();
  buffer(program, "logits").offset = ~uint64_t(63);
  expectError(program, {"'logits': arena range", "exceeds the arena"});
}

TEST(VerifierTest, MisalignedTemporary) {
  Program program = makeTinyProgram();
  buffer(program, "logits").offset += 4;
  expectError(program, {"'logits': arena offset", "is not 64-byte aligned"});
}

TEST(VerifierTest, UnknownEnumValues) {
  Program program = makeTinyProgram();
  buffer(program, "h").kind = static_cast<BufferKind>(9);
  expectError(program, {"'h': unknown buffer kind 9"});
  program = makeTinyProgram();
  buffer(program, "h").dtype = static_cast<DType>(9);
  expectError(program, {"'h': unknown dtype 9 (known: f32, i32, bf16"});
  program = makeTinyProgram();
  buffer(program, "h").init = static_cast<Init>(200);
  expectError(program, {"'h': unknown init 200"});
}

TEST(VerifierTest, DuplicateParameterName) {
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight").name = "model.embed_tokens.weight";
  expectError(program, {"buffer 5 'model.embed_tokens.weight': name is "
                        "already used by buffer 3"});
}

TEST(VerifierTest, UnnamedOptimizerState) {
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight.exp_avg").name.clear();
  expectError(program, {"an optimizer state needs a name"});
}

TEST(VerifierTest, InitKinds) {
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight").init = Init::None;
  expectError(program, {"'lm_head.weight': init 'none' is not valid for a "
                        "parameter"});
  program = makeTinyProgram();
  buffer(program, "lm_head.weight.exp_avg").init = Init::Ones;
  expectError(program, {"init 'ones' is not valid for an optimizer state"});
  program = makeTinyProgram();
  buffer(program, "logits").init = Init::Zeros;
  expectError(program, {"'logits': init 'zeros' is not valid for a temporary"});
  program = makeTinyProgram();
  buffer(program, "lm_head.weight").initStd = 0;
  expectError(program, {"'lm_head.weight': normal init needs 0 < init_std <= "
                        "1, found 0"});
  // A standard deviation no model trains from (the damaged 1e30).
  program = makeTinyProgram();
  buffer(program, "lm_head.weight").initStd = 1e30f;
  expectError(program, {"'lm_head.weight': normal init needs 0 < init_std <= "
                        "1, found 1e+30"});
  program = makeTinyProgram();
  buffer(program, "lm_head.weight").initStd = std::nanf("");
  expectError(program, {"'lm_head.weight': normal init needs 0 < init_std"});
  // Only a normal init reads init_std; elsewhere it is a stray value.
  program = makeTinyProgram();
  buffer(program, "model.norm.weight").initStd = 0.02f;
  expectError(program, {"'model.norm.weight': init_std 0.02 is given, but "
                        "only a normal init has one"});
}

TEST(VerifierTest, TensorNames) {
  // The damaged name of the issue, and other names HF cannot load.
  for (const char *name :
       {"model.layers.1/self_attn.k_proj.weight", "model..norm.weight",
        ".model.norm.weight", "model.norm.weight.", "model.norm weight",
        "model.norm.w\x01eight"}) {
    SCOPED_TRACE(name);
    Program program = makeTinyProgram();
    buffer(program, "model.norm.weight").name = name;
    expectError(program, {"the name is not a tensor name ("});
  }
  Program program = makeTinyProgram();
  buffer(program, "model.norm.weight").name = std::string(2000, 'a');
  expectError(program, {"the name is 2000 characters long, more than the "
                        "1024 allowed"});
  program = makeTinyProgram();
  buffer(program, "model.norm.weight").name = "model.layers.1/x";
  expectError(program, {"character '/' in segment '1/x'"});
}

TEST(VerifierTest, IntegerParameter) {
  Program program = makeTinyProgram();
  buffer(program, "model.norm.weight").dtype = DType::I32;
  expectError(program, {"'model.norm.weight': a parameter must be f32"});
}

TEST(VerifierTest, GemmDimensionsMustFitInt32) {
  // Fine for the element count, but a GEMM's sizes are 32-bit.
  Program program = makeTinyProgram();
  buffer(program, "lm_head.weight").shape = {int64_t(1) << 31, 4};
  expectError(program, {"buffer 5 'lm_head.weight': shape [2147483648, 4] has "
                        "more rows (all but the last dimension) than the "
                        "2147483647 a GEMM can address"});
  program = makeTinyProgram();
  buffer(program, "h").shape = {int64_t(1) << 16, int64_t(1) << 16, 4};
  expectError(program, {"'h': shape [65536, 65536, 4] has more rows"});
  program = makeTinyProgram();
  buffer(program, "lm_head.weight").shape = {4, int64_t(1) << 31};
  expectError(program, {"'lm_head.weight': last dimension of shape [4, "
                        "2147483648] exceeds the 2147483647 a GEMM can "
                        "address"});
  // A zero dimension makes zero rows however large the others are: the
  // buffer passes, and the Linear then rejects its shape.
  program = makeTinyProgram();
  buffer(program, "lm_head.weight").shape = {int64_t(1) << 20, int64_t(1) << 20,
                                             0, 4};
  expectError(program, {"(Linear): operand 1 has shape"});
}

//===----------------------------------------------------------------------===//
// Stacked-expert names
//===----------------------------------------------------------------------===//

constexpr const char *kStackedW1 =
    "model.layers.0.block_sparse_moe.experts.{e}.w1.weight";

TEST(VerifierTest, StackedNameHoldsOnePlaceholder) {
  Program program = makeMoeProgram();
  buffer(program, kStackedW1).name =
      "model.layers.0.block_sparse_moe.experts.{e}.w1.{e}";
  expectError(program, {"'model.layers.0.block_sparse_moe.experts.{e}.w1.{e}'"
                        ": a stacked-expert name must hold \"{e}\" only once"});
}

TEST(VerifierTest, StackedBufferNeedsAnExpertDimension) {
  Program program = makeMoeProgram();
  buffer(program, kStackedW1).shape = {0, 6, 8};
  expectError(program, {"w1.weight': a stacked-expert buffer needs rank >= 2 "
                        "and experts along a non-empty dimension 0, found "
                        "shape [0, 6, 8]"});
  program = makeMoeProgram();
  buffer(program, "model.norm.weight.exp_avg").name = "model.norm.{e}.exp_avg";
  expectError(program, {"'model.norm.{e}.exp_avg': a stacked-expert buffer "
                        "needs rank >= 2",
                        "found shape [8]"});
}

TEST(VerifierTest, PerExpertNamesMustBeFree) {
  const std::string gate = "model.layers.0.block_sparse_moe.gate.weight";
  Program program = makeMoeProgram();
  // Expert 3's slice of w1 would be saved under the gate's name.
  buffer(program, gate.c_str()).name =
      "model.layers.0.block_sparse_moe.experts.3.w1.weight";
  expectError(program,
              {"'model.layers.0.block_sparse_moe.experts.{e}.w1.weight': the "
               "name of expert 3 ('model.layers.0.block_sparse_moe.experts.3."
               "w1.weight') is already used by buffer"});
  // The moments are stacked too.
  program = makeMoeProgram();
  buffer(program, gate.c_str()).name =
      "model.layers.0.block_sparse_moe.experts.0.w2.weight.exp_avg_sq";
  expectError(program, {"'model.layers.0.block_sparse_moe.experts.{e}.w2."
                        "weight.exp_avg_sq': the name of expert 0"});
  // Names outside the expert range, or not as std::to_string writes an
  // index, never collide.
  for (const char *name :
       {"model.layers.0.block_sparse_moe.experts.4.w1.weight",
        "model.layers.0.block_sparse_moe.experts.03.w1.weight",
        "model.layers.0.block_sparse_moe.experts.x1.w1.weight"}) {
    program = makeMoeProgram();
    buffer(program, gate.c_str()).name = name;
    expectValid(program);
  }
}

//===----------------------------------------------------------------------===//
// Program fields
//===----------------------------------------------------------------------===//

TEST(VerifierTest, ProgramFieldOutOfRange) {
  Program program = makeTinyProgram();
  program.loss = 1000;
  expectError(program, {"program field 'loss': buffer index 1000 is out of "
                        "range"});
}

TEST(VerifierTest, TokensMustMatchBatchAndSeq) {
  Program program = makeTinyProgram();
  program.model.seq = 5;
  expectError(program, {"program field 'tokens' (buffer 0 'tokens'): "
                        "expected input i32 [2, 5], found input i32 [2, 4]"});
}

// Document masking's positions (3.7): an input like the tokens, of its
// own, fed by the runtime; no other input is.
TEST(VerifierTest, DocumentPositionsAreAnInputLikeTheTokens) {
  MoeConfig config;
  config.documentMasking = true;
  expectValid(makeMoeProgram(config));
  Program program = makeMoeProgram(config);
  buffer(program, "positions").shape = {2, 4};
  expectError(program, {"program field 'positions' (buffer",
                        "'positions'): expected input i32 [2, 5], found "
                        "input i32 [2, 4]"});
  program = makeMoeProgram(config);
  program.positions = program.tokens;
  expectError(program, {"program field 'positions' (",
                        ") must be a buffer "
                        "of its own, not the tokens, targets or step"});
  program = makeMoeProgram(config);
  program.positions = -1;
  expectError(program, {"'positions'",
                        "an input that is not the program's "
                        "tokens, targets, positions or step is never fed by "
                        "the runtime"});
}

TEST(VerifierTest, StepMustBeAnInt32Scalar) {
  Program program = makeTinyProgram();
  buffer(program, "step").shape = {1};
  expectError(program, {"program field 'step'",
                        "expected input i32 [], found input i32 [1]"});
}

TEST(VerifierTest, LossMustBeAScalar) {
  Program program = makeTinyProgram();
  program.loss = bufferNamed(program, "logits");
  expectError(program,
              {"program field 'loss' (buffer", "'logits'",
               "expected temporary f32 [], found temporary f32 [2, 4, 8]"});
}

TEST(VerifierTest, UnfedInput) {
  Program program = makeTinyProgram();
  buffer(program, "h").kind = BufferKind::Input;
  buffer(program, "h").offset = 0;
  expectError(program, {"'h': an input that is not the program's tokens"});
}

TEST(VerifierTest, OutputNeverWritten) {
  Program program = makeTinyProgram();
  program.instructions.erase(program.instructions.begin() +
                             instructionWith(program, Opcode::LearningRate));
  // The AdamWs now read lr before anything writes it.
  expectError(program, {"(AdamW): operand 4", "'lr') is a temporary that no "
                                              "earlier instruction writes"});
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

TEST(VerifierTest, UnknownOpcode) {
  Program program = makeTinyProgram();
  program.instructions[1].opcode = static_cast<Opcode>(200);
  expectError(program,
              {"instruction 1 (<invalid opcode>): unknown opcode 200"});
}

TEST(VerifierTest, OperandIndexOutOfRange) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::Linear).operands[1] = 77;
  expectError(program, {"instruction 2 (Linear): operand 1: buffer index 77 "
                        "is out of range"});
}

TEST(VerifierTest, ResultIndexOutOfRange) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::Linear).results[0] = 77;
  expectError(program, {"instruction 2 (Linear): result 0: buffer index 77 "
                        "is out of range"});
}

TEST(VerifierTest, OperandCount) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::Linear).operands.pop_back();
  expectError(program,
              {"instruction 2 (Linear): expected 2 operands, found 1"});
  program = makeTinyProgram();
  instruction(program, Opcode::GlobalNorm).operands.clear();
  expectError(program, {"(GlobalNorm): expected at least 1 operands, found 0"});
}

TEST(VerifierTest, ResultCount) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::RmsNormGrad).results.pop_back();
  expectError(program, {"(RmsNormGrad): expected 2 results, found 1"});
}

TEST(VerifierTest, MessageCarriesTheLocation) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::Linear).operands.pop_back();
  expectError(program, {"(at tiny.mlir:3)"});
}

TEST(VerifierTest, DType) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::Embedding).operands[0] =
      bufferNamed(program, "h");
  expectError(program, {"instruction 0 (Embedding): operand 0 (buffer",
                        "'h') has dtype f32, expected i32"});
}

TEST(VerifierTest, ShapeMismatch) {
  testing::TinyConfig config;
  config.hidden = 64;
  config.vocab = 64;
  Program program = makeTinyProgram(config);
  buffer(program, "lm_head.weight").shape = {64, 32};
  expectError(program, {"instruction 2 (Linear): operand 1 has shape [64, 32], "
                        "expected [N, 64]"});
}

TEST(VerifierTest, LeadingDimsMustAgree) {
  Program program = makeTinyProgram();
  buffer(program, "logits").shape = {8, 8};
  expectError(program, {"instruction 2 (Linear): result 0 has shape [8, 8], "
                        "expected [2, 4, 8]"});
}

TEST(VerifierTest, MissingAttribute) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::RmsNorm).floatAttrs.clear();
  expectError(program, {"instruction 1 (RmsNorm): expected 1 float attribute "
                        "[eps], found 0"});
  program = makeTinyProgram();
  instruction(program, Opcode::LearningRate).intAttrs.pop_back();
  expectError(program, {"(LearningRate): expected 2 int attributes [warmup, "
                        "decay], found 1"});
}

TEST(VerifierTest, NonFiniteAttribute) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::ClipCoefficient).floatAttrs[0] = NAN;
  expectError(program, {"(ClipCoefficient): float attribute 0 (max_norm) is "
                        "not finite (nan)"});
}

TEST(VerifierTest, WeightedSumCoefficients) {
  Program program = makeMoeProgram();
  instruction(program, Opcode::WeightedSum).floatAttrs.pop_back();
  expectError(program, {"(WeightedSum): expected one float attribute "
                        "(coefficient) per operand: 2 operands, 1 float "
                        "attribute"});
}

TEST(VerifierTest, LearningRateSchedule) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::LearningRate).intAttrs = {10, 5};
  expectError(program, {"(LearningRate): int attribute 1 (decay) must be >= "
                        "warmup, found 5"});
  program = makeTinyProgram();
  instruction(program, Opcode::LearningRate).floatAttrs = {1e-4f, 1e-3f};
  expectError(program, {"(LearningRate): float attribute 0 (peak) must be >= "
                        "min, found 0.0001"});
}

TEST(VerifierTest, AdamWOperands) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::AdamW).floatAttrs[0] = 1.0f;
  expectError(program,
              {"(AdamW): float attribute 0 (beta1) must be in [0, 1)"});
  program = makeTinyProgram();
  instruction(program, Opcode::AdamW).floatAttrs[2] = 0.0f;
  expectError(program, {"(AdamW): float attribute 2 (eps) must be > 0"});
  program = makeTinyProgram();
  std::swap(instruction(program, Opcode::AdamW).operands[0],
            instruction(program, Opcode::AdamW).operands[2]);
  expectError(program, {"(AdamW): operand 0", "must be a parameter, found an "
                                              "optimizer state"});
  program = makeTinyProgram();
  instruction(program, Opcode::AdamW).operands[3] =
      instruction(program, Opcode::AdamW).operands[2];
  expectError(program, {"(AdamW): exp_avg and exp_avg_sq"});
  program = makeTinyProgram();
  instruction(program, Opcode::AdamW, 1).operands[1] =
      bufferNamed(program, "dhead");
  expectError(program, {"(AdamW): operand 1 has shape [8, 4], expected [4]"});
}

/// makeMeshProgram's ZeRO-1 update over dp = 2 (tp = 1).
Program zeroOneProgram() {
  using namespace testing;
  MeshConfig config{2, 1};
  config.zeroOne = true;
  return makeMeshProgram(config);
}

TEST(VerifierTest, ShardedAdamWUpdatesABlockOfTheWholeWeight) {
  expectValid(zeroOneProgram());
  // The update of another whole weight, of `rows` rows, with z's block.
  auto updating = [](int64_t rows) {
    Program program = zeroOneProgram();
    testing::ProgramBuilder b(program);
    uint32_t other = b.parameter("other", {rows, 3}, Init::Normal, 0.5f);
    instruction(program, Opcode::ShardedAdamW).operands[0] = other;
    return program;
  };
  // The whole weight has no rows the group divides.
  expectError(updating(5), {"(ShardedAdamW): operand 0",
                            "'other') has no "
                            "dimension 0 that the 2 ranks of group"});
  // The gradient is not the whole weight's block of rows.
  expectError(updating(6), {"(ShardedAdamW): operand 1",
                            "has shape [2, 3], "
                            "expected [3, 3]: operand 0's rows over the 2 "
                            "ranks"});
  Program program;
  // The moments must be stored as the block: split over the group.
  program = zeroOneProgram();
  program.buffers[bufferNamed(program, "z.exp_avg")].split.clear();
  expectError(program, {"(ShardedAdamW): operand 2", "is split unsplit, "
                                                     "expected [{dp}, {}]"});
}

TEST(VerifierTest, ShardedAdamWRefusesALoadBalancedGroup) {
  using namespace testing;
  MeshConfig config{1, 2};
  config.zeroOne = true;
  Program program = makeMeshProgram(config);
  ProgramBuilder b(program);
  // A mesh with a cp axis: a group it leads splits rows load-balanced.
  program.meshAxes.push_back("cp");
  program.meshShape.push_back(2);
  instruction(program, Opcode::ShardedAdamW).intAttrs[0] = b.group({"cp"});
  expectError(program, {"(ShardedAdamW): shards over group", "{cp}, which cp "
                                                             "leads"});
}

TEST(VerifierTest, ABlockMasterNeedsTheUpdateThatGathersItsCopy) {
  Program program = zeroOneProgram();
  testing::ProgramBuilder b(program);
  uint32_t master = b.parameter("zb", {2, 3}, Init::Normal, 0.5f);
  b.split(master, {{"dp"}, {}});
  uint32_t copy = b.workingCopy(master);
  program.buffers[copy].shape = {4, 3};
  program.buffers[copy].split.clear();
  expectError(program, {"'zb.bf16'", "its master",
                        "is a block of its rows, "
                        "but no ShardedAdamW gathers it"});
}

TEST(VerifierTest, AdamWMustNotDecayAnUndecayedParameter) {
  Program program = makeTinyProgram();
  // The second update is model.norm.weight's, marked weight_decay = false.
  instruction(program, Opcode::AdamW, 1).floatAttrs[3] = 0.1f;
  expectError(program, {"(AdamW): float attribute 3 (weight_decay) must be 0 "
                        "for operand 0 (buffer 4 'model.norm.weight'), whose "
                        "weight_decay flag is false, found 0.1"});
  // A decayed parameter may still be updated without decay.
  program = makeTinyProgram();
  instruction(program, Opcode::AdamW, 0).floatAttrs[3] = 0.0f;
  expectValid(program);
}

TEST(VerifierTest, OptimizerStateSharedBetweenUpdates) {
  Program program = makeTinyProgram();
  Instruction &first = instruction(program, Opcode::AdamW, 0);
  instruction(program, Opcode::AdamW, 2).operands[2] = first.operands[2];
  expectError(program, {"(AdamW): operand 2", "is already updated by "
                                              "instruction"});
}

TEST(VerifierTest, ScoredRouterIsValid) {
  expectValid(makeScoredRouterProgram());
}

// ints: top_k, scoring, normalize, groups, top_groups.
TEST(VerifierTest, RoutingGroupsMustSplitTheExperts) {
  Program program = makeScoredRouterProgram();
  instruction(program, Opcode::ScoredRouter).intAttrs[3] = 3;
  expectError(program, {"(ScoredRouter): int attribute 3 (groups) must "
                        "divide E = 4 into groups of at least 2 experts"});
  program = makeScoredRouterProgram();
  instruction(program, Opcode::ScoredRouterGrad).intAttrs[3] = 4;
  expectError(program, {"(ScoredRouterGrad): int attribute 3 (groups) must "
                        "divide E = 4 into groups of at least 2 experts"});
}

TEST(VerifierTest, TopGroupsMustHoldTopK) {
  Program program = makeScoredRouterProgram();
  instruction(program, Opcode::ScoredRouter).intAttrs[4] = 3;
  expectError(program, {"(ScoredRouter): int attribute 4 (top_groups) must "
                        "be <= groups (2) and its groups hold top_k (2) "
                        "experts"});
  // One group of two holds top_k = 2, but not 3.
  program = makeScoredRouterProgram();
  instruction(program, Opcode::ScoredRouter).intAttrs[0] = 3;
  expectError(program, {"(ScoredRouter): int attribute 4 (top_groups)"});
}

TEST(VerifierTest, RouterScaleMustBePositive) {
  Program program = makeScoredRouterProgram();
  instruction(program, Opcode::ScoredRouter).floatAttrs[1] = 0.0f;
  expectError(program, {"(ScoredRouter): float attribute 1 (scale) must be "
                        "> 0"});
}

TEST(VerifierTest, RouterBiasHoldsOneValuePerExpert) {
  Program program = makeScoredRouterProgram();
  program.buffers[bufferNamed(program, "router.bias")].shape = {3};
  expectError(program, {"(ScoredRouter): operand 1"});
}

TEST(VerifierTest, BiasBalancingRateGoesWithABias) {
  Program program = makeScoredRouterProgram();
  instruction(program, Opcode::ExpertLoadUpdate).floatAttrs[0] = 0.0f;
  expectError(program, {"(ExpertLoadUpdate): float attribute 0 (rate) must "
                        "be > 0 with a bias operand"});
  program = makeScoredRouterProgram();
  instruction(program, Opcode::ExpertLoadUpdate).operands.pop_back();
  expectError(program, {"(ExpertLoadUpdate): float attribute 0 (rate) must "
                        "be 0 without a bias operand"});
}

TEST(VerifierTest, LoadCounterIsPersistentState) {
  Program program = makeScoredRouterProgram();
  Instruction &counter = instruction(program, Opcode::ExpertLoad);
  counter.operands[1] = bufferNamed(program, "scores");
  expectError(program, {"(ExpertLoad): operand 1"});
}

TEST(VerifierTest, LoadCounterCountsARoutersIds) {
  Program program = makeScoredRouterProgram();
  // The Mixtral router of the same program routes 4 experts too: fine.
  instruction(program, Opcode::ExpertLoad).operands[0] =
      bufferNamed(program, "route_ids");
  expectValid(program);
  // A counter of another length than the router's experts.
  program = makeScoredRouterProgram();
  instruction(program, Opcode::ExpertLoad).operands[1] =
      testing::ProgramBuilder(program).state("other.load", {5}, {});
  expectError(program, {"(ExpertLoad): operand 0",
                        "must hold the expert ids of a Router over 5 experts"});
}

TEST(VerifierTest, LoadCounterIsUpdatedOnce) {
  Program program = makeScoredRouterProgram();
  program.instructions.push_back(
      instruction(program, Opcode::ExpertLoadUpdate));
  expectError(program, {"(ExpertLoadUpdate): operand 0", "is already updated "
                                                         "by instruction"});
}

TEST(VerifierTest, HeadNormWidthIsHeadsTimesTheWeight) {
  Program program = makeTinyProgram();
  testing::ProgramBuilder b(program);
  uint32_t h = bufferNamed(program, "h");
  uint32_t w = bufferNamed(program, "model.norm.weight");
  int64_t width = program.buffers[h].shape.back();
  uint32_t y = b.temporary("head_norm", program.buffers[h].shape);
  b.emit(Opcode::HeadRmsNorm, {h, w}, {y}, {/*heads=*/1}, {1e-5f});
  expectValid(program);
  instruction(program, Opcode::HeadRmsNorm).intAttrs[0] = 2;
  std::string message = "(HeadRmsNorm): last dim " + std::to_string(width) +
                        " is not heads (2) * the weight's " +
                        std::to_string(width) + " features";
  expectError(program, {message.c_str()});
}

TEST(VerifierTest, TopKOutOfRange) {
  Program program = makeMoeProgram();
  instruction(program, Opcode::Router).intAttrs[0] = 5;
  expectError(program, {"(Router): int attribute 0 (top_k) must be in [1, E] "
                        "with E = 4, found 5"});
  program = makeMoeProgram();
  instruction(program, Opcode::AuxLoss).intAttrs[0] = 0;
  expectError(program,
              {"(AuxLoss): int attribute 0 (top_k) must be in [1, E]"});
}

TEST(VerifierTest, NegativeCapacityFactor) {
  Program program = makeMoeProgram();
  instruction(program, Opcode::Router).floatAttrs[0] = -1.0f;
  expectError(program, {"(Router): float attribute 0 (capacity_factor) must "
                        "be >= 0"});
}

TEST(VerifierTest, AttentionHeads) {
  Program program = makeMoeProgram();
  instruction(program, Opcode::Attention).intAttrs = {2, 3};
  expectError(program, {"(Attention): int attribute 1 (kv_heads) must be >= 1 "
                        "and divide heads (2)"});
  program = makeMoeProgram();
  instruction(program, Opcode::Attention).intAttrs = {3, 1};
  expectError(program, {"(Attention): query width 8 is not heads (3)"});
  program = makeMoeProgram();
  buffer(program, "lse").shape = {2, 5, 2};
  expectError(program, {"(Attention): result 1 has shape [2, 5, 2], expected "
                        "[2, 2, 5]"});
}

TEST(VerifierTest, RopeNeedsEvenHeadDim) {
  Program program = makeMoeProgram();
  instruction(program, Opcode::Rope).intAttrs[0] = 8; // head dim 1
  expectError(program, {"(Rope): operand 0 has last dim 8, expected heads (8) "
                        "* an even, positive head dim"});
  program = makeMoeProgram();
  instruction(program, Opcode::RopeGrad).intAttrs[0] = 3;
  expectError(program, {"(RopeGrad): operand 0 has last dim 8, expected heads "
                        "(3)"});
}

TEST(VerifierTest, ExpertIdsMustComeFromAMatchingRouter) {
  Program program = makeMoeProgram();
  // A second router over the two route weights: ids in [0, 2), not [0, 4).
  testing::ProgramBuilder b(program);
  uint32_t probs = b.temporary("probs2", {2, 5, 2});
  uint32_t weights = b.temporary("weights2", {2, 5, 2});
  uint32_t ids = b.temporary("ids2", {2, 5, 2}, DType::I32);
  size_t router = instructionWith(program, Opcode::Router);
  Instruction second = program.instructions[router];
  second.operands = {bufferNamed(program, "route_weights")};
  second.results = {probs, weights, ids};
  program.instructions.insert(program.instructions.begin() + router + 1,
                              second);
  instruction(program, Opcode::Experts).operands[2] = ids;
  expectError(program, {"(Experts): operand 2 (buffer",
                        "'ids2') must hold the "
                        "expert ids of a Router over 4 experts"});
}

TEST(VerifierTest, ExpertsFp8Recipe) {
  for (Opcode opcode : {Opcode::Experts, Opcode::ExpertsGrad}) {
    SCOPED_TRACE(opcodeName(opcode));
    Program program = makeMoeProgram();
    // The recipe is int attributes [fp8_scaling (an enum), fp8_block,
    // fp8_dispatch], after the group when there is one.
    instruction(program, opcode).intAttrs = {2, 128, 0};
    expectValid(program);
    instruction(program, opcode).intAttrs = {1, 1, 1};
    expectValid(program);
    // FP8 on the wire only (targets without FP8 GEMMs).
    instruction(program, opcode).intAttrs = {0, 128, 1};
    expectValid(program);
    instruction(program, opcode).intAttrs = {0, 128, 0};
    expectError(program, {"int attribute 0 (fp8_scaling) must not be none "
                          "without FP8 token dispatch, found none (0)"});
    instruction(program, opcode).intAttrs = {4, 128, 0};
    expectError(program, {"int attribute 0 (fp8_scaling) must be none (0), "
                          "tensorwise (1), blockwise (2) or delayed (3), "
                          "found 4"});
    instruction(program, opcode).intAttrs = {2, 0, 0};
    expectError(program, {"int attribute 1 (fp8_block) must be in "
                          "[1, 65536], found 0"});
    instruction(program, opcode).intAttrs = {2, 128, 2};
    expectError(program, {"int attribute 2 (fp8_dispatch) must be 0 or 1, "
                          "found 2"});
    instruction(program, opcode).intAttrs = {2, 128};
    expectError(program, {"expected 0 int attributes [] and optionally "
                          "[group] and optionally [fp8_scaling, fp8_block, "
                          "fp8_dispatch], found 2"});
    // A float recipe (before version 3.0) is refused by name.
    instruction(program, opcode).intAttrs.clear();
    instruction(program, opcode).floatAttrs = {2.0f, 128.0f, 0.0f};
    expectError(program, {"expected 0 float attributes [], found 3"});
  }
}

// Delayed scaling reads and updates an amax history [E, 9, L], state that
// persists across steps; Fp8AmaxUpdate ends its step, once.
TEST(VerifierTest, ExpertsFp8AmaxHistory) {
  auto withHistory = [](std::vector<int64_t> shape, bool state = true) {
    Program program = makeMoeProgram();
    testing::ProgramBuilder b(program);
    uint32_t history =
        state ? b.state("experts.fp8_amax_history", shape)
              : b.parameter("experts.fp8_amax_history", shape, Init::Zeros);
    for (Opcode opcode : {Opcode::Experts, Opcode::ExpertsGrad}) {
      instruction(program, opcode).intAttrs = {3, 128, 0};
      instruction(program, opcode).operands.push_back(history);
    }
    b.emit(Opcode::Fp8AmaxUpdate, {history}, {});
    return program;
  };
  expectValid(withHistory({4, 9, 17}));
  expectError(withHistory({4, 9, 1}),
              {"(Experts): operand 6 (buffer", "has shape [4, 9, 1], expected "
               "an amax history [4, 9, L >= 2]"});
  expectError(withHistory({2, 9, 4}), {"expected an amax history [4, 9"});
  expectError(withHistory({4, 9, 4}, /*state=*/false),
              {"(Experts): operand 6 (buffer", "must be an optimizer state"});

  Program program = withHistory({4, 9, 4});
  instruction(program, Opcode::ExpertsGrad).intAttrs = {1, 128, 0};
  expectError(program, {"(ExpertsGrad): operand 7 (an FP8 amax history) needs "
                        "delayed FP8 scaling (fp8_scaling delayed)"});
  program = withHistory({4, 9, 4});
  instruction(program, Opcode::Experts).intAttrs.clear();
  expectError(program, {"(Experts): operand 6 (an FP8 amax history) needs "
                        "delayed FP8 scaling"});
  program = withHistory({4, 9, 4});
  instruction(program, Opcode::Experts).operands.pop_back();
  expectError(program, {"(Experts): delayed FP8 scaling needs an amax history "
                        "as operand 6"});

  program = withHistory({4, 9, 4});
  program.instructions.push_back(program.instructions.back());
  expectError(program, {"(Fp8AmaxUpdate): operand 0 (buffer",
                        "is already updated by instruction"});
  program = withHistory({4, 9, 4});
  program.instructions.back().operands = {
      bufferNamed(program, "model.layers.0.block_sparse_moe.experts.{e}.w1."
                           "weight.exp_avg")};
  expectError(program, {"(Fp8AmaxUpdate): operand 0 (buffer",
                        "expected an amax history"});
}

// The forms that keep the experts' up projections: hidden is f32
// [..., k, 2, F], on one rank (no group).
TEST(VerifierTest, ExpertsKeepingHidden) {
  testing::MoeConfig config;
  config.keepHidden = true;
  expectValid(makeMoeProgram(config));

  Program program = makeMoeProgram(config);
  program.buffers[bufferNamed(program, "expert_hidden")].shape.back() += 1;
  expectError(program, {"(ExpertsWithHidden): result 1 has shape [2, 5, 2, "
                        "2, 7], expected [2, 5, 2, 2, 6]"});

  program = makeMoeProgram(config);
  testing::ProgramBuilder b(program);
  b.mesh({"ep"}, {1});
  int64_t group = b.group({"ep"});
  instruction(program, Opcode::ExpertsWithHidden).intAttrs = {group};
  instruction(program, Opcode::ExpertsGradWithHidden).intAttrs = {group};
  expectError(program, {"(ExpertsWithHidden): keeps the experts' up "
                        "projections but distributes the experts over group",
                        "the backward recomputes them (ExpertsGrad)"});
}

TEST(VerifierTest, ExpertAssignmentsMustFitAGemm) {
  // 2^30 tokens, each routed to k = 2 experts: one expert's gathered rows
  // could reach 2^31, one more than a 32-bit GEMM dimension holds.
  const int64_t tokens = int64_t(1) << 30;
  for (Opcode opcode : {Opcode::Experts, Opcode::ExpertsGrad}) {
    Program program = makeMoeProgram();
    testing::ProgramBuilder b(program);
    Instruction big = instruction(program, opcode);
    // Activations ([batch, seq, X]) get the large token count; the expert
    // weights and their gradients keep their shapes.
    auto enlarge = [&](uint32_t &index, const std::string &name) {
      Buffer old = program.buffers[index];
      if (old.shape.size() == 3 && old.shape[0] == program.model.batch &&
          old.shape[1] == program.model.seq)
        index = b.temporary(name, {tokens, old.shape.back()}, old.dtype);
    };
    for (size_t i = 0; i < big.operands.size(); ++i)
      enlarge(big.operands[i], "big_operand" + std::to_string(i));
    for (size_t i = 0; i < big.results.size(); ++i)
      enlarge(big.results[i], "big_result" + std::to_string(i));
    // Checked first, before the rest of the program.
    program.instructions.insert(program.instructions.begin(), big);
    std::string expected =
        opcode == Opcode::Experts
            ? "instruction 0 (Experts): operand 1 routes 2147483648 "
              "token-expert assignments (rows times k), more than the "
              "2147483647 a GEMM can address"
            : "instruction 0 (ExpertsGrad): operand 2 routes 2147483648";
    expectError(program, {expected.c_str()});
  }
}

//===----------------------------------------------------------------------===//
// Dataflow
//===----------------------------------------------------------------------===//

TEST(VerifierTest, GlobalNormReadsTheAppliedGradients) {
  // The damaged operand: a weight where a gradient belongs.
  Program program = makeTinyProgram();
  instruction(program, Opcode::GlobalNorm).operands[2] =
      testing::bufferNamed(program, "lm_head.weight");
  expectError(program, {"(GlobalNorm): operand 2 (buffer 5 'lm_head.weight', "
                        "a parameter) is not a gradient: the norm reads the "
                        "gradients that AdamW instructions apply"});
  program = makeTinyProgram();
  instruction(program, Opcode::GlobalNorm).operands[2] =
      testing::bufferNamed(program, "logits");
  expectError(program, {"operand 2 (buffer", "'logits', a temporary) is not a "
                        "gradient"});
  // Each gradient once, and every one of them.
  program = makeTinyProgram();
  instruction(program, Opcode::GlobalNorm).operands.push_back(
      testing::bufferNamed(program, "dhead"));
  expectError(program, {"(GlobalNorm): operand 3 (buffer", "'dhead') is already "
                        "in the norm of instruction"});
  program = makeTinyProgram();
  instruction(program, Opcode::GlobalNorm).operands.pop_back();
  expectError(program, {"(AdamW): its gradient (buffer", "'dhead') is not an "
                        "operand of the GlobalNorm"});
}

TEST(VerifierTest, UninitialisedTemporaryRead) {
  Program program = makeTinyProgram();
  std::swap(program.instructions[2], program.instructions[3]);
  expectError(program, {"instruction 2 (CrossEntropy): operand 0 (buffer",
                        "'logits') is a temporary that no earlier instruction "
                        "writes"});
}

TEST(VerifierTest, ResultMustNotBePersistent) {
  Program program = makeTinyProgram();
  instruction(program, Opcode::LinearGradWeight).results[0] =
      bufferNamed(program, "lm_head.weight");
  expectError(program, {"(LinearGradWeight): result 0 (buffer 5 "
                        "'lm_head.weight') is a parameter"});
}

TEST(VerifierTest, OverlappingLiveTemporaries) {
  Program program = makeTinyProgram();
  // logits is still read by CrossEntropyGrad, which writes dlogits.
  buffer(program, "dlogits").offset = buffer(program, "logits").offset;
  expectError(program,
              {"instruction 5 (CrossEntropyGrad): result 0 (buffer",
               "'dlogits', arena [", "overlaps buffer", "'logits' (arena [",
               "which is live from instruction 2 to instruction 5"});
}

TEST(VerifierTest, PartialOverlap) {
  Program program = makeTinyProgram();
  buffer(program, "dn").offset = buffer(program, "dlogits").offset + 64;
  expectError(program, {"(LinearGradInput): result 0", "'dn'",
                        "overlaps buffer", "'dlogits'"});
}

TEST(VerifierTest, OverlapWithAnOutput) {
  Program program = makeTinyProgram();
  buffer(program, "clip_coef").offset = buffer(program, "loss").offset;
  expectError(program, {"'clip_coef'", "overlaps buffer", "'loss'",
                        "live from instruction 3 to the end of the step"});
}

TEST(VerifierTest, HandoverNeedsAnInPlaceKernel) {
  Program program = makeTinyProgram();
  // RmsNormGrad reads dn for the last time but cannot write over it.
  buffer(program, "dh").offset = buffer(program, "dn").offset;
  expectError(program,
              {"(RmsNormGrad): result 0", "'dh'", "overlaps buffer", "'dn'"});
}

TEST(VerifierTest, AliasingNeedsAnInPlaceKernel) {
  Program program = makeTinyProgram();
  Instruction &norm = instruction(program, Opcode::RmsNorm);
  norm.results[0] = norm.operands[0];
  expectError(program,
              {"instruction 1 (RmsNorm): result 0 (buffer",
               "'h') is "
               "also operand 0, but this kernel cannot work in place"});
}

TEST(VerifierTest, DuplicateResults) {
  Program program = makeMoeProgram();
  Instruction &grad = instruction(program, Opcode::ExpertsGrad);
  grad.results[3] = grad.results[2]; // dw3 := dw1, same shape
  expectError(program,
              {"(ExpertsGrad): results 2 and 3 are the same buffer", "'dw1'"});
}

} // namespace
} // namespace moe::rt
