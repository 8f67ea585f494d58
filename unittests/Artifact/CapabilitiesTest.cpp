//===- CapabilitiesTest.cpp - what each backend runs, checked at load -----===//
//
// The capability record (moe/Runtime/Capabilities.h) and the load-time
// check over it: an artifact needing what its backend lacks is refused,
// naming the capability, what the artifact needs and what the backend has.
//
//===----------------------------------------------------------------------===//

#include "TestProgram.h"

#include "moe/Runtime/Artifact/Capabilities.h"
#include "moe/Runtime/Artifact/ExpertsRecipe.h"
#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Capabilities.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <set>
#include <string>

namespace moe::rt {
namespace {

using ::testing::HasSubstr;
using testing::instructionWith;
using testing::makeExpertParallelProgram;
using testing::makeMeshProgram;
using testing::makeMoeProgram;
using testing::makePipelinedTinyProgram;
using testing::makeTinyProgram;
using testing::MoeConfig;
using testing::serialize;

const std::string kOrigin = "artifact 'x.moebin'";

/// The check's message, or "ok".
std::string check(const Program &program, std::string_view backend,
                  const RunRequest &request = {}) {
  absl::Status status = checkCapabilities(program, kOrigin, backend, request);
  return status.ok() ? "ok" : std::string(status.message());
}

/// `program`'s expert instructions (their group kept) on `recipe`, with
/// `dispatch` for the FP8 token dispatch.
void setRecipe(Program &program, Fp8Scaling recipe, bool dispatch = false,
               int64_t block = 128) {
  for (Opcode opcode : {Opcode::Experts, Opcode::ExpertsGrad}) {
    Instruction &inst = program.instructions[instructionWith(program, opcode)];
    std::optional<int64_t> group = ops::expertsRecipeOf(inst)->group;
    ops::Fp8Attrs fp8{recipe, block, dispatch};
    ops::EncodedAttrs attrs = opcode == Opcode::Experts
                                  ? ops::buildExperts(group, fp8)
                                  : ops::buildExpertsGrad(group, fp8);
    inst.intAttrs = attrs.ints;
    inst.floatAttrs = attrs.floats;
  }
}

/// makeMoeProgram, compiled for `target`, with every expert GEMM on
/// `recipe`.
Program withRecipe(Fp8Scaling recipe, const std::string &target,
                   const MoeConfig &config = {}) {
  Program program = makeMoeProgram(config);
  program.target = target;
  setRecipe(program, recipe);
  return program;
}

TEST(CapabilitiesTest, TheTableNamesEachTargetOnceOnAKnownBackend) {
  std::set<std::string_view> targets;
  for (const caps::Capabilities &record : caps::kCapabilities) {
    EXPECT_TRUE(targets.insert(record.target).second) << record.target;
    EXPECT_TRUE(record.backend == "cpu" || record.backend == "cuda");
    EXPECT_TRUE(record.hasDtype(DType::F32) && record.hasDtype(DType::I32));
  }
  // The CPU backend runs everything the compiler emits.
  const caps::Capabilities &cpu = *caps::targetCapabilities("cpu");
  for (caps::Fp8Recipe recipe : caps::kFp8Recipes)
    EXPECT_TRUE(cpu.hasRecipe(recipe));
  EXPECT_TRUE(cpu.fp8Dispatch && cpu.pipelineStages && cpu.microbatches &&
              cpu.expertChunks && cpu.asyncCollectives);
  EXPECT_EQ(caps::targetCapabilities("v100"), nullptr);
}

TEST(CapabilitiesTest, TheCudaBackendAsItIsToday) {
  const caps::Capabilities &a100 = *caps::targetCapabilities("a100");
  const caps::Capabilities &h100 = *caps::targetCapabilities("h100");
  EXPECT_EQ(caps::recipeList(a100), "none");
  EXPECT_EQ(caps::recipeList(h100), "tensorwise, blockwise, delayed");
  EXPECT_EQ(
      caps::describeCapabilities(h100),
      "fp8_recipes: tensorwise, blockwise, delayed; fp8_dispatch: yes; "
      "fp8_gemm_alignment: 16; pipeline_stages: yes; microbatches: yes; "
      "expert_chunks: yes; async_collectives: yes; dtypes: f32, i32, bf16; "
      "fp8_block: 128; linear_cross_entropy: no; gemm_epilogues: no; "
      "scored_routers: no; router_losses: no; latent_attention: no; "
      "stage_shared_parameters: no; document_masking: no; "
      "context_parallel: no; sharded_optimizer: no; scaled_rope: no");
  // A cpu-target artifact on the cuda backend gets what every GPU runs.
  caps::Capabilities common = caps::backendCapabilities("cuda", "cpu");
  EXPECT_TRUE(common.target.empty());
  EXPECT_EQ(common.fp8Recipes, a100.fp8Recipes);
  // The CPU backend emulates every target.
  EXPECT_EQ(caps::backendCapabilities("cpu", "h100").target, "cpu");
}

// The acceptance case: blockwise FP8 on an A100 is refused at load.
TEST(CapabilitiesTest, BlockwiseFp8OnA100IsRefused) {
  Program program = withRecipe(Fp8Scaling::Blockwise, "a100");
  ASSERT_TRUE(verifyProgram(program).ok());
  std::string message = check(program, "cuda");
  EXPECT_THAT(message, HasSubstr("artifact 'x.moebin' needs fp8 recipe "
                                 "blockwise (instruction "));
  EXPECT_THAT(message, HasSubstr("(Experts)"));
  EXPECT_THAT(message, HasSubstr("; the cuda backend on a100 lacks it "
                                 "(fp8_recipes: none)"));
  EXPECT_EQ(check(program, "cpu"), "ok");
}

TEST(CapabilitiesTest, RecipesAndWidthsOnHopper) {
  MoeConfig wide;
  wide.hidden = 16;
  wide.ffn = 32;
  // Blockwise runs on cuBLASLt's block scaling: blocks of 128 only.
  EXPECT_EQ(check(withRecipe(Fp8Scaling::Blockwise, "h100", wide), "cuda"),
            "ok");
  Program block64 = withRecipe(Fp8Scaling::Blockwise, "h100", wide);
  setRecipe(block64, Fp8Scaling::Blockwise, false, 64);
  std::string message = check(block64, "cuda");
  EXPECT_THAT(message, HasSubstr("needs fp8 blocks of 64 (instruction "));
  EXPECT_THAT(message,
              HasSubstr("the cuda backend on h100 lacks it (fp8_block: 128)"));
  EXPECT_EQ(check(block64, "cpu"), "ok");
  // Tensorwise runs, on widths that are multiples of 16 only.
  std::string narrow =
      check(withRecipe(Fp8Scaling::Tensorwise, "h200"), "cuda");
  EXPECT_THAT(narrow, HasSubstr("needs fp8 GEMMs of hidden 8 and ffn 6 "));
  EXPECT_THAT(narrow, HasSubstr("the cuda backend on h200 lacks it "
                                "(fp8_gemm_alignment: multiples of 16)"));
  EXPECT_EQ(check(withRecipe(Fp8Scaling::Tensorwise, "h200", wide), "cuda"),
            "ok");
  // Compiled for the CPU: what every cuda target runs, which is no FP8.
  EXPECT_THAT(check(withRecipe(Fp8Scaling::Tensorwise, "cpu", wide), "cuda"),
              HasSubstr("needs fp8 recipe tensorwise (instruction "));
  EXPECT_THAT(check(withRecipe(Fp8Scaling::Tensorwise, "cpu", wide), "cuda"),
              HasSubstr("; the cuda backend lacks it for target cpu "
                        "(fp8_recipes on all of a100, h100, h200: none)"));
}

TEST(CapabilitiesTest, PipelinesAndMicrobatchesRunOnEveryBackend) {
  Program pipelined = makePipelinedTinyProgram(2, 4);
  pipelined.target = "h100";
  EXPECT_EQ(check(pipelined, "cuda"), "ok");
  EXPECT_EQ(check(pipelined, "cpu"), "ok");
  Program accumulated = makePipelinedTinyProgram(1, 4);
  accumulated.target = "a100";
  EXPECT_EQ(check(accumulated, "cuda"), "ok");
  EXPECT_EQ(check(makeTinyProgram(), "cuda"), "ok");
}

TEST(CapabilitiesTest, Fp8DispatchOnlyWhereTokensTravel) {
  Program program = makeExpertParallelProgram();
  program.target = "h100";
  setRecipe(program, Fp8Scaling::None, /*dispatch=*/true);
  ASSERT_TRUE(verifyProgram(program).ok());
  // Both backends send FP8 rows (the cuda backend since issue 17).
  EXPECT_EQ(check(program, "cuda"), "ok");
  EXPECT_EQ(check(program, "cpu"), "ok");
  // Without expert parallelism nothing is sent: the flag changes nothing.
  Program local = makeMoeProgram();
  local.target = "h100";
  setRecipe(local, Fp8Scaling::None, /*dispatch=*/true);
  EXPECT_EQ(check(local, "cuda"), "ok");
}

// A sequence split over cp (a group cp leads) runs on the CPU only; a split
// over another axis is no context parallelism.
TEST(CapabilitiesTest, ContextParallelismRunsOnTheCpuOnly) {
  Program program = makeMeshProgram();
  program.target = "h100";
  EXPECT_EQ(check(program, "cuda"), "ok");
  program.meshAxes[1] = "cp";
  for (AxisList &group : program.groups)
    std::replace(group.begin(), group.end(), std::string("tp"),
                 std::string("cp"));
  EXPECT_EQ(check(program, "cpu"), "ok");
  EXPECT_THAT(check(program, "cuda"),
              HasSubstr("needs a sequence split over cp (context parallelism, "
                        "group 0); the cuda backend on h100 lacks it "
                        "(context_parallel: no)"));
  // RoPE on a block of a sequence split over another axis, which the cuda
  // kernels would read as the whole sequence.
  Program block = makeMoeProgram();
  block.target = "h100";
  block.meshAxes = {"tp"};
  block.meshShape = {2};
  block.groups = {{"tp"}};
  block.instructions[instructionWith(block, Opcode::Rope)].intAttrs.push_back(
      0);
  ASSERT_TRUE(verifyProgram(block).ok());
  EXPECT_EQ(check(block, "cpu"), "ok");
  EXPECT_THAT(check(block, "cuda"),
              HasSubstr("needs a block of a split sequence (instruction"));
}

TEST(CapabilitiesTest, RunOptionsTheBackendWouldIgnore) {
  Program program = makeTinyProgram();
  program.target = "h200";
  // Every backend runs them today: a record without chunks refuses them.
  EXPECT_EQ(check(program, "cuda", {/*expertChunks=*/8}), "ok");
  EXPECT_EQ(check(program, "cpu", {/*expertChunks=*/8}), "ok");
  for (const caps::Capabilities &record : caps::kCapabilities)
    EXPECT_TRUE(record.expertChunks && record.asyncCollectives)
        << record.target << ": name the option this test refuses";
  EXPECT_EQ(check(program, "cuda", {1, /*asyncCollectives=*/true}), "ok");
  EXPECT_EQ(check(program, "tpu"),
            "unknown backend 'tpu'; known backends: cpu, cuda");
}

TEST(CapabilitiesTest, TheArtifactRecordsItsTarget) {
  Program program = makeTinyProgram();
  program.target = "h200";
  std::vector<uint8_t> bytes = serialize(program);
  absl::StatusOr<Program> read =
      parseArtifact(bytes.data(), bytes.size(), "t.moebin");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->target, "h200");
  program.target = "v100";
  bytes = serialize(program);
  read = parseArtifact(bytes.data(), bytes.size(), "t.moebin");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "artifact 't.moebin' names an unknown target 'v100'; known "
            "targets: cpu, a100, h100, h200");
  program.target.clear();
  bytes = serialize(program);
  read = parseArtifact(bytes.data(), bytes.size(), "t.moebin");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "artifact 't.moebin' names no target (known targets: cpu, a100, "
            "h100, h200); recompile it with this moec");
}

} // namespace
} // namespace moe::rt
