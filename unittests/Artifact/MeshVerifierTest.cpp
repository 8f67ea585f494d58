//===- MeshVerifierTest.cpp - checks of partitioned programs --------------===//
//
// The version 1.1 rules: the mesh, its groups and batch axes, the splits of
// parameters and optimizer state, the collectives' layouts and the groups
// of grouped losses and norms.
//
//===----------------------------------------------------------------------===//

#include "ExpectVerify.h"

#include <algorithm>
#include <limits>

namespace moe::rt {
namespace {

using testing::buffer;
using testing::expectError;
using testing::expectValid;
using testing::instruction;
using testing::makeMeshProgram;
using testing::makeTinyProgram;
using testing::MeshConfig;

TEST(MeshVerifierTest, MeshProgramsAreValid) {
  for (MeshConfig config :
       {MeshConfig{1, 1}, MeshConfig{2, 1}, MeshConfig{1, 2}, MeshConfig{2, 2},
        MeshConfig{4, 2}}) {
    SCOPED_TRACE(testing::makeMeshProgram(config).meshDescription());
    expectValid(makeMeshProgram(config));
  }
}

TEST(MeshVerifierTest, RankArithmetic) {
  Program program = makeMeshProgram({4, 2});
  EXPECT_EQ(program.numRanks(), 8);
  EXPECT_EQ(program.partsOf({"dp"}), 4);
  EXPECT_EQ(program.partsOf({"tp", "dp"}), 8);
  EXPECT_EQ(program.partsOf({}), 1);
  EXPECT_EQ(program.meshDescription(), "dp=4 x tp=2");
  EXPECT_EQ(makeTinyProgram().numRanks(), 1);
  EXPECT_EQ(makeTinyProgram().meshDescription(), "1 rank");
}

//===----------------------------------------------------------------------===//
// The mesh, groups and batch axes
//===----------------------------------------------------------------------===//

TEST(MeshVerifierTest, AxesAndSizesMustPair) {
  Program program = makeMeshProgram();
  program.meshShape.pop_back();
  expectError(program, {"mesh: 2 axis names but 1 sizes"});
}

TEST(MeshVerifierTest, AxisNames) {
  Program program = makeMeshProgram();
  program.meshAxes[1] = "";
  expectError(program, {"mesh: axis 1 has an empty name"});
  program = makeMeshProgram();
  program.meshAxes[1] = "dp";
  expectError(program, {"mesh: axis 'dp' appears twice"});
}

TEST(MeshVerifierTest, AxisSizes) {
  Program program = makeMeshProgram();
  program.meshShape[0] = 0;
  expectError(program,
              {"mesh: axis 'dp' has size 0, expected a positive size"});
  program = makeMeshProgram();
  program.meshShape = {int64_t(1) << 20, int64_t(1) << 20};
  expectError(program, {"mesh: dp=1048576 x tp=1048576 has more ranks than "
                        "the 2147483647 MPI can number"});
}

TEST(MeshVerifierTest, GroupAxesMustBeMeshAxes) {
  Program program = makeMeshProgram();
  program.groups[2] = {"ep"};
  expectError(program, {"mesh: group 2 {ep} names axis 'ep', which is not an "
                        "axis of the mesh (dp=2 x tp=2)"});
  program = makeMeshProgram();
  program.groups[1] = {"tp", "tp"};
  expectError(program, {"mesh: group 1 {tp,tp} names axis 'tp' twice"});
}

TEST(MeshVerifierTest, AProgramWithoutAMeshHasNoAxes) {
  Program program = makeTinyProgram();
  program.groups = {{"dp"}};
  expectError(program, {"mesh: group 0 {dp} names axis 'dp', which is not an "
                        "axis of the mesh (1 rank)"});
  program = makeTinyProgram();
  program.batchAxes = {"dp"};
  expectError(program, {"mesh: the batch axes {dp} names axis 'dp'"});
}

TEST(MeshVerifierTest, BatchAxes) {
  Program program = makeMeshProgram();
  program.batchAxes = {"dp", "fsdp"};
  expectError(program, {"mesh: the batch axes {dp,fsdp} names axis 'fsdp', "
                        "which is not an axis of the mesh"});
  program = makeMeshProgram();
  program.batchAxes = {"dp", "dp"};
  expectError(program, {"mesh: the batch axes {dp,dp} names axis 'dp' twice"});
}

//===----------------------------------------------------------------------===//
// Splits
//===----------------------------------------------------------------------===//

TEST(MeshVerifierTest, OnlyPersistentBuffersAreSplit) {
  Program program = makeMeshProgram();
  buffer(program, "logits").split = {{"dp"}, {}, {}};
  expectError(program, {"'logits': a temporary cannot be split; only "
                        "parameters, optimizer state and working copies are"});
  program = makeMeshProgram();
  buffer(program, "tokens").split = {{"dp"}, {}};
  expectError(program, {"'tokens': an input cannot be split"});
}

TEST(MeshVerifierTest, SplitHasOneEntryPerDimension) {
  Program program = makeMeshProgram();
  buffer(program, "v").split = {{"tp", "dp"}};
  expectError(program, {"buffer", "'v': split [{tp,dp}] has 1 entries for "
                                  "shape [2, 4], expected one per dimension"});
}

TEST(MeshVerifierTest, SplitAxesAreMeshAxesUsedOnce) {
  Program program = makeMeshProgram();
  buffer(program, "v").split = {{"ep"}, {}};
  expectError(program, {"'v': split [{ep}, {}] names axis 'ep', which is not "
                        "an axis of the mesh (dp=2 x tp=2)"});
  program = makeMeshProgram();
  buffer(program, "v").split = {{"dp"}, {"dp"}};
  expectError(program, {"'v': split [{dp}, {dp}] uses axis 'dp' twice"});
}

TEST(MeshVerifierTest, WholeTensorMustBeCountable) {
  Program program = makeMeshProgram();
  program.meshShape = {int64_t(1) << 15, 2};
  buffer(program, "u").shape = {int64_t(1) << 30, int64_t(1) << 30};
  buffer(program, "u").split = {{"dp"}, {}};
  expectError(program, {"'u': the whole tensor of split [{dp}, {}] with "
                        "blocks of shape [1073741824, 1073741824] has more "
                        "elements than int64 can count"});
}

TEST(MeshVerifierTest, AdamWMomentsAreSplitLikeTheParameter) {
  Program program = makeMeshProgram();
  buffer(program, "w.exp_avg_sq").split = {{}, {"tp"}, {}};
  expectError(program, {"(AdamW): operand 3 (buffer",
                        "'w.exp_avg_sq') is "
                        "split [{}, {tp}, {}] but operand 0 (buffer",
                        "'w') is split [{}, {dp}, {}]"});
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

TEST(MeshVerifierTest, CollectiveAttributes) {
  Program program = makeMeshProgram();
  instruction(program, Opcode::AllReduce).intAttrs.push_back(0);
  expectError(program, {"(AllReduce): expected 1 int attribute [group], "
                        "found 2"});
  program = makeMeshProgram();
  instruction(program, Opcode::Slice).intAttrs.pop_back();
  expectError(program, {"(Slice): expected 2 int attributes [group, dim], "
                        "found 1"});
  program = makeMeshProgram();
  instruction(program, Opcode::ReduceScatter).intAttrs[0] = 4;
  expectError(program, {"(ReduceScatter): int attribute 0 (group) must be a "
                        "group index in [0, 4), found 4"});
  program = makeMeshProgram();
  instruction(program, Opcode::AllGather).intAttrs[1] = 2;
  expectError(program, {"instruction 0 (AllGather): int attribute 1 (dim) "
                        "must be a dimension of operand 0 (rank 2), found 2"});
  program = makeMeshProgram();
  instruction(program, Opcode::AllGather).intAttrs[1] = -1;
  expectError(program, {"(AllGather): int attribute 1 (dim) must be a "
                        "dimension of operand 0 (rank 2), found -1"});
}

TEST(MeshVerifierTest, CollectiveShapes) {
  Program program = makeMeshProgram();
  // w_full gathers w [3, 4, 5] over dp = 2 along dim 1.
  buffer(program, "w_full").shape = {6, 4, 5};
  expectError(program, {"(AllGather): result 0 has shape [6, 4, 5], expected "
                        "[3, 8, 5]"});
  program = makeMeshProgram();
  buffer(program, "w_block").shape = {3, 8, 5};
  expectError(program, {"(Slice): result 0 has shape [3, 8, 5], expected "
                        "[3, 4, 5]"});
  program = makeMeshProgram();
  buffer(program, "v_sum").shape = {4, 2};
  expectError(program, {"(AllReduce): result 0 has shape [4, 2], expected "
                        "[2, 4]"});
}

TEST(MeshVerifierTest, ScatteredDimensionMustDivide) {
  Program program = makeMeshProgram();
  // x is [2, 4, 3]: the 4 ranks of {dp, tp} do not divide dimension 0.
  Instruction &scatter = instruction(program, Opcode::ReduceScatter);
  scatter.intAttrs = {1, 0};
  expectError(program, {"(ReduceScatter): operand 0 has size 2 along "
                        "dimension 0, which the 4 ranks of group 1 {dp,tp} "
                        "do not divide"});
  instruction(program, Opcode::Slice).intAttrs = {1, 0};
  scatter.intAttrs = {2, 1};
  expectError(program, {"(Slice): operand 0 has size 3 along dimension 0, "
                        "which the 4 ranks of group 1 {dp,tp} do not divide"});
}

TEST(MeshVerifierTest, CollectivesMoveAtMostAnIntOfElements) {
  Program program = makeMeshProgram();
  buffer(program, "v").shape = {int64_t(1) << 16, int64_t(1) << 15};
  expectError(program, {"(AllGather): operand 0 (buffer",
                        "'v') has "
                        "2147483648 elements, more than the 2147483647 one "
                        "collective can move"});
}

TEST(MeshVerifierTest, CollectivesAreF32) {
  Program program = makeMeshProgram();
  instruction(program, Opcode::AllReduce).operands[0] = program.tokens;
  expectError(program,
              {"(AllReduce): operand 0 (buffer", "'tokens') has "
                                                 "dtype i32, expected f32"});
}

TEST(MeshVerifierTest, ReduceBucketPairsItsOperandsAndResults) {
  Program program = makeMeshProgram();
  instruction(program, Opcode::ReduceBucket).results.pop_back();
  expectError(program, {"(ReduceBucket): has 3 operands but 2 results, "
                        "expected one per operand"});
}

TEST(MeshVerifierTest, ReduceBucketMovesOneDtype) {
  Program program = makeMeshProgram();
  buffer(program, "u_bucket").dtype = DType::BF16;
  expectError(program, {"(ReduceBucket): buffer",
                        "'u_bucket' has dtype bf16, "
                        "but operand 0 f32: a bucket moves one dtype"});
}

TEST(MeshVerifierTest, ReduceBucketResultShapes) {
  Program program = makeMeshProgram();
  buffer(program, "x_bucket").shape = {2, 3, 4};
  expectError(program, {"(ReduceBucket): result 1"});
  program = makeMeshProgram();
  // Blocks of dimension 0 over {dp}: [8, 4] -> [4, 4], not [8, 4].
  buffer(program, "v_full_scattered").shape = {8, 4};
  expectError(program, {"(ReduceBucket): result 0"});
}

TEST(MeshVerifierTest, ReduceBucketScattersDimensionZero) {
  Program program = makeMeshProgram();
  Instruction &bucket = instruction(program, Opcode::ReduceBucket, 1);
  bucket.operands[0] = testing::bufferNamed(program, "u");
  expectError(program, {"(ReduceBucket): operand 0 (buffer",
                        "'u') has no "
                        "dimension 0 that the 2 ranks of group 2 {dp} divide"});
}

TEST(MeshVerifierTest, ReduceBucketPacksAtMostAnIntOfElements) {
  Program program = makeMeshProgram();
  // A parameter, which takes no arena room, twice: each within what one
  // collective can move, both not.
  Instruction &bucket = instruction(program, Opcode::ReduceBucket);
  uint32_t u = testing::bufferNamed(program, "u");
  bucket.operands = bucket.results = {u, u};
  buffer(program, "u").shape = {(int64_t(1) << 30) + 1};
  expectError(program, {"(ReduceBucket): packs 2147483650 elements, more than "
                        "the 2147483647 one collective can move"});
}

//===----------------------------------------------------------------------===//
// Grouped losses and norms
//===----------------------------------------------------------------------===//

TEST(MeshVerifierTest, LossGroups) {
  Program program = makeMeshProgram();
  instruction(program, Opcode::CrossEntropy).intAttrs.push_back(0);
  expectError(program, {"(CrossEntropy): expected 0 int attributes [] and "
                        "optionally [group], found 2"});
  program = makeMeshProgram();
  instruction(program, Opcode::CrossEntropyGrad).intAttrs[0] = 9;
  expectError(program, {"(CrossEntropyGrad): int attribute 0 (group) must be "
                        "a group index in [0, 4), found 9"});
  program = makeMeshProgram();
  instruction(program, Opcode::AuxLoss).intAttrs[1] = -1;
  expectError(program, {"(AuxLoss): int attribute 1 (group) must be a group "
                        "index in [0, 4), found -1"});
  program = makeMeshProgram();
  instruction(program, Opcode::AuxLossGrad).intAttrs = {2, 1, 0};
  expectError(program, {"(AuxLossGrad): expected 1 int attribute [top_k] and "
                        "optionally [group], found 3"});
  // Without the group the losses are local, as in version 1.0.
  program = makeMeshProgram();
  instruction(program, Opcode::AuxLoss).intAttrs.pop_back();
  instruction(program, Opcode::CrossEntropy).intAttrs.clear();
  expectValid(program);
}

TEST(MeshVerifierTest, GlobalNormGroups) {
  Program program = makeMeshProgram();
  instruction(program, Opcode::GlobalNorm).intAttrs = {0, 1};
  expectError(program, {"(GlobalNorm): expected no int attributes or one "
                        "group per operand (6), found 2"});
  program = makeMeshProgram();
  instruction(program, Opcode::GlobalNorm).intAttrs[1] = -2;
  expectError(program, {"(GlobalNorm): int attribute 1 (group) must be -1 "
                        "(not split) or a group index in [0, 4), found -2"});
  program = makeMeshProgram();
  instruction(program, Opcode::GlobalNorm).intAttrs = {-1, -1, -1, -1, -1, -1};
  expectValid(program);
}

//===----------------------------------------------------------------------===//
// Experts distributed over a group
//===----------------------------------------------------------------------===//

TEST(MeshVerifierTest, ExpertParallelProgramsAreValid) {
  for (testing::ExpertParallelConfig config :
       {testing::ExpertParallelConfig{1, 1},
        {1, 2},
        {2, 2},
        {1, 4, 1, 2},
        {2, 1, 2, 2, 0.5f}}) {
    SCOPED_TRACE(testing::makeExpertParallelProgram(config).meshDescription());
    expectValid(testing::makeExpertParallelProgram(config));
  }
}

TEST(MeshVerifierTest, ExpertGroups) {
  Program program = testing::makeExpertParallelProgram();
  instruction(program, Opcode::Experts).intAttrs.push_back(0);
  expectError(program, {"(Experts): expected 0 int attributes [] and "
                        "optionally [group] and optionally [fp8_scaling, "
                        "fp8_block, fp8_dispatch], found 2"});
  program = testing::makeExpertParallelProgram();
  instruction(program, Opcode::ExpertsGrad).intAttrs[0] = 3;
  expectError(program, {"(ExpertsGrad): int attribute 0 (group) must be a "
                        "group index in [0, 3), found 3"});
}

TEST(MeshVerifierTest, ExpertIdsAreGlobalOverTheGroup) {
  // Three experts per rank of {ep}: the router picks among all six.
  Program program = testing::makeExpertParallelProgram({1, 2, 3, 3});
  instruction(program, Opcode::Experts).intAttrs.clear();
  expectError(program, {"(Experts): operand 2 (buffer",
                        "'ids') must hold the "
                        "expert ids of a Router over 3 experts"});
  // Top-2 needs two experts in the group: the {dp} group of one rank
  // leaves one.
  program = testing::makeExpertParallelProgram({1, 2, 1, 2});
  instruction(program, Opcode::ExpertsGrad).intAttrs[0] = 1;
  expectError(program, {"(ExpertsGrad): top-k (last dim of the weights) is 2, "
                        "expected 1 <= k <= E = 1 (1 on each of the 1 ranks "
                        "of group 1 {dp})"});
}

TEST(MeshVerifierTest, ExpertExchangesMustFitMpiCounts) {
  // 2^26 tokens of top-3 on each of 2 ranks: one rank may receive 2^27 * 3
  // rows of H = 8 floats (x) or 2H + 1 = 17 (x, dy, weight), beyond an int
  // count, though each rank's own assignments fit a GEMM.
  const int64_t tokens = int64_t(1) << 26;
  for (Opcode opcode : {Opcode::Experts, Opcode::ExpertsGrad}) {
    Program program = testing::makeExpertParallelProgram({1, 2, 3, 3});
    testing::ProgramBuilder b(program);
    Instruction big = instruction(program, opcode);
    for (size_t i = 0; i < big.operands.size(); ++i) {
      const Buffer &old = program.buffers[big.operands[i]];
      if (old.shape.size() == 3 && old.shape[0] == program.model.batch)
        big.operands[i] = b.temporary("big" + std::to_string(i),
                                      {tokens, old.shape.back()}, old.dtype);
    }
    for (size_t i = 0; i < big.results.size(); ++i) {
      const Buffer &old = program.buffers[big.results[i]];
      if (old.shape.size() == 3 && old.shape[0] == program.model.batch)
        big.results[i] = b.temporary("big_result" + std::to_string(i),
                                     {tokens, old.shape.back()}, old.dtype);
    }
    program.instructions.insert(program.instructions.begin(), big);
    std::string expected = absl::StrCat(
        "instruction 0 (", opcodeName(opcode), "): operand ",
        opcode == Opcode::Experts ? 1 : 2,
        " routes 201326592 token-expert assignments on each of the 2 ranks "
        "of group 0 {ep}; one rank may receive them all, as rows of ",
        opcode == Opcode::Experts ? 8 : 17,
        " floats: more than the 2147483647 one exchange can move");
    expectError(program, {expected.c_str()});
  }
}

//===----------------------------------------------------------------------===//
// Context parallelism (3.8): a sequence split over a group cp leads
//===----------------------------------------------------------------------===//

/// makeMoeProgram() (seq 5) on a mesh of `axis` = 2, its RoPE
/// instructions holding a rank's block of a sequence of 10 split over it
/// (their sequence group).
Program sequenceSplitProgram(const char *axis) {
  Program program = testing::makeMoeProgram();
  program.meshAxes = {axis};
  program.meshShape = {2};
  program.groups = {{axis}};
  for (Instruction &inst : program.instructions)
    if (inst.opcode == Opcode::Rope)
      inst.intAttrs.push_back(0);
  return program;
}

TEST(MeshVerifierTest, SequenceGroupOfRope) {
  expectValid(sequenceSplitProgram("tp"));
  Program program = sequenceSplitProgram("tp");
  program.versionMinor = 7;
  expectError(program, {"(Rope)", "has a sequence group, which artifacts "
                                  "have since version 3.8; this one is 3.7"});
  // cp's load-balanced split needs 2 cp = 4 chunks of the whole 10.
  expectError(sequenceSplitProgram("cp"),
              {"(Rope)", "its sequence (10 whole) is split load-balanced over "
                         "group 0 {cp}, which needs it divisible by 2 * cp "
                         "(4)"});
}

// Attention's keys and values are the whole sequence its queries are a
// block of.
TEST(MeshVerifierTest, SequenceGroupOfAttentionNeedsTheWholeKeys) {
  Program program = sequenceSplitProgram("tp");
  instruction(program, Opcode::Attention).intAttrs.push_back(0);
  expectError(program, {"(Attention)", "operand 1", "[2, 10, "});
}

// A bucket scatters contiguous blocks: never over a group cp leads.
TEST(MeshVerifierTest, BucketsDoNotScatterOverCp) {
  Program program = makeMeshProgram();
  program.meshAxes[0] = "cp";
  for (AxisList *axes : {&program.batchAxes})
    std::replace(axes->begin(), axes->end(), std::string("dp"),
                 std::string("cp"));
  for (AxisList &group : program.groups)
    std::replace(group.begin(), group.end(), std::string("dp"),
                 std::string("cp"));
  for (Buffer &b : program.buffers)
    for (AxisList &dim : b.split)
      std::replace(dim.begin(), dim.end(), std::string("dp"),
                   std::string("cp"));
  expectError(program, {"(ReduceBucket)", "which cp leads: a bucket "
                                          "scatters contiguous blocks"});
}

} // namespace
} // namespace moe::rt
