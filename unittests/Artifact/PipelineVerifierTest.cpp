//===- PipelineVerifierTest.cpp - checks of pipelined programs ------------===//
//
// The version 1.2 rules: microbatches and stages, the "pp" mesh axis, the
// stage and phase of every instruction, the schedule, and that running per
// stage and phase in the schedule's order computes what program order
// would.
//
//===----------------------------------------------------------------------===//

#include "ExpectVerify.h"

namespace moe::rt {
namespace {

using testing::expectError;
using testing::expectValid;
using testing::makePipelinedTinyProgram;

/// The index of the first instruction with `opcode`.
size_t first(const Program &program, Opcode opcode) {
  for (size_t i = 0; i < program.instructions.size(); ++i)
    if (program.instructions[i].opcode == opcode)
      return i;
  ADD_FAILURE() << "no " << opcodeName(opcode);
  return 0;
}

TEST(PipelineVerifierTest, PipelinedProgramsAreValid) {
  expectValid(makePipelinedTinyProgram(1, 1));
  expectValid(makePipelinedTinyProgram(1, 4));
  expectValid(makePipelinedTinyProgram(2, 4));
  expectValid(makePipelinedTinyProgram(2, 4, "gpipe"));
  expectValid(makePipelinedTinyProgram(2, 4, "zero-bubble"));
}

TEST(PipelineVerifierTest, ShapeOfThePipeline) {
  Program program = makePipelinedTinyProgram(2, 4);
  program.pipeline.microbatches = 5000;
  expectError(program, {"pipeline: 2 stages x 1 virtual stages and 5000 "
                        "microbatches"});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.virtualStages = 0;
  expectError(program, {"pipeline: 2 stages x 0 virtual stages"});
  // Stages or a schedule without microbatches are not a plain program.
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.microbatches = 0;
  expectError(program, {"pipeline: stages or a schedule without microbatches"});
}

TEST(PipelineVerifierTest, StagesAreTheOutermostMeshAxis) {
  Program program = makePipelinedTinyProgram(2, 4);
  program.meshAxes = {"dp"};
  expectError(program, {"2 stages need mesh axis 0 to be 'pp' of size 2, "
                        "the mesh is dp=2"});
  program = makePipelinedTinyProgram(1, 4);
  program.meshAxes = {"pp"};
  program.meshShape = {2};
  expectError(program, {"a mesh axis 'pp' without pipeline stages"});
  program = makePipelinedTinyProgram(2, 4);
  program.groups.push_back({"pp"});
  expectError(program, {"group 0 spans 'pp': collectives do not cross stages"});
  program = makePipelinedTinyProgram(2, 4);
  program.batchAxes = {"pp"};
  expectError(program, {"the batch is split over 'pp'"});
}

TEST(PipelineVerifierTest, EveryInstructionHasAStageAndAPhase) {
  Program program = makePipelinedTinyProgram(2, 4);
  size_t n = program.instructions.size();
  program.pipeline.instructionStage.pop_back();
  expectError(program, {"pipeline: ", "stages and ",
                        (std::to_string(n) + " instructions").c_str()});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionPhase[0] = static_cast<PipelinePhase>(9);
  expectError(program, {"instruction 0 (Embedding)",
                        "pipeline phase 9 is not one the schema defines"});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionStage[0] = 2;
  expectError(program, {"instruction 0 (Embedding)",
                        "pipeline stage 2 of a forward instruction, expected "
                        "0..1"});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionStage[first(program, Opcode::GlobalNorm)] = 2;
  expectError(program, {"(GlobalNorm)", "pipeline stage 2 of a optimizer "
                                        "instruction, expected -1..1"});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionPhase[first(program, Opcode::AdamW)] =
      PipelinePhase::Backward;
  expectError(program, {"(AdamW)", "AdamW outside the optimizer phase would "
                                   "update once per microbatch"});
}

TEST(PipelineVerifierTest, TheScheduleIsWellFormedAndRuns) {
  Program program = makePipelinedTinyProgram(2, 4);
  program.pipeline.schedule = "fastest";
  expectError(program, {"pipeline: unknown schedule 'fastest'"});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.ranks.pop_back();
  expectError(program, {"pipeline: a schedule for 1 ranks, expected 2"});
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.ranks[1].pop_back();
  expectError(program, {"pipeline: schedule: "});
  // Rank 1 waiting for a backward that needs its own later forward.
  program = makePipelinedTinyProgram(2, 4, "gpipe");
  std::vector<PipelineAction> &last = program.pipeline.ranks[1];
  std::swap(last.front(), last.back());
  expectError(program, {"pipeline: schedule: "});
}

TEST(PipelineVerifierTest, ValuesFlowInScheduleOrder) {
  // The loss on stage 0 would read the logits of stage 1.
  Program program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionStage[first(program, Opcode::CrossEntropy)] = 0;
  expectError(program, {"(CrossEntropy)", "the forward of stage 0 reads",
                        "from the forward of stage 1, which the schedule runs "
                        "later"});
  // The optimizer may read the microbatches' gradients, nothing else.
  program = makePipelinedTinyProgram(2, 4);
  program.instructions[first(program, Opcode::GlobalNorm)].operands.push_back(
      program.loss);
  expectError(program, {"(GlobalNorm)", "the optimizer of stage -1 reads",
                        "of the forward of stage 1"});
  // An optimizer instruction of one stage reads that stage's values only.
  program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionStage[first(program, Opcode::GlobalNorm)] = 0;
  expectError(program, {"(GlobalNorm)", "the optimizer of stage 0 reads",
                        "of the backward of stage 1"});
}

TEST(PipelineVerifierTest, AParameterLivesOnOneStage) {
  Program program = makePipelinedTinyProgram(2, 4);
  program.pipeline.instructionStage[first(program, Opcode::AdamW)] = 1;
  expectError(program, {"(Embedding)", "reads buffer", "model.embed_tokens."
                        "weight' on pipeline stage 0, but it lives on stage 1"});
}

/// The tiny model with its head tied to the table, over two stages that
/// both hold the table and sum their halves of its gradient.
Program makeTiedOverStages() {
  testing::TinyConfig config;
  config.tiedHead = true;
  config.sumOverStages = true;
  return makePipelinedTinyProgram(2, 4, "1f1b", config);
}

/// The index of the last instruction with `opcode`.
size_t last(const Program &program, Opcode opcode) {
  for (size_t i = program.instructions.size(); i-- > 0;)
    if (program.instructions[i].opcode == opcode)
      return i;
  ADD_FAILURE() << "no " << opcodeName(opcode);
  return 0;
}

TEST(PipelineVerifierTest, TwoStagesShareAParameterBySummingItsGradient) {
  expectValid(makeTiedOverStages());
  testing::TinyConfig config;
  config.tiedHead = true;
  config.sumOverStages = true;
  expectValid(makePipelinedTinyProgram(2, 4, "zero-bubble", config));
  // Without the sums, the head's stage reads a table it does not hold.
  config.sumOverStages = false;
  expectError(makePipelinedTinyProgram(2, 4, "1f1b", config),
              {"(Linear)", "model.embed_tokens.weight' on pipeline stage 1, "
                           "but it lives on stage 0"});
  // Both sums, and so both updates, on one stage.
  Program program = makeTiedOverStages();
  program.pipeline.instructionStage[last(program, Opcode::AdamW)] = 0;
  program.pipeline
      .instructionStage[last(program, Opcode::PipelineGradientSum)] = 0;
  expectError(program, {"(PipelineGradientSum)",
                        "has no PipelineGradientSum of the same halves on "
                        "stage 1 next to it"});
}

TEST(PipelineVerifierTest, AStageSumExchangesInTheOptimizerWithAnotherRank) {
  Program program = makeTiedOverStages();
  size_t sum = first(program, Opcode::PipelineGradientSum);
  program.pipeline.instructionPhase[sum] = PipelinePhase::Backward;
  expectError(program, {"(PipelineGradientSum)",
                        "outside the optimizer phase would exchange every "
                        "microbatch"});
  // Both halves from its own stage: there is nothing to exchange.
  program = makeTiedOverStages();
  Instruction &own =
      program.instructions[first(program, Opcode::PipelineGradientSum)];
  own.operands[0] = own.operands[1];
  expectError(program, {"(PipelineGradientSum)",
                        "sums two gradient halves that stage 0 computes both "
                        "of"});
  // The second update of the table from the head's half alone: a second
  // update of it, whose gradient the norm does not count.
  program = makeTiedOverStages();
  Instruction &update = program.instructions[last(program, Opcode::AdamW)];
  update.operands[1] =
      program.instructions[first(program, Opcode::LinearGradWeight)].results[0];
  expectError(program, {"(AdamW)", "its gradient (buffer",
                        "'dhead') is not "
                        "an operand of the GlobalNorm"});
}

// State no update places on a stage is held by no rank: reading it would
// read memory the rank does not have.
TEST(PipelineVerifierTest, StateReadOutsideTheOptimizerHasAStage) {
  Program program = makePipelinedTinyProgram(2, 4);
  Instruction &embedding =
      program.instructions[first(program, Opcode::Embedding)];
  const Buffer &table = program.buffers[embedding.operands[1]];
  std::vector<int64_t> shape = table.shape;
  std::vector<AxisList> split = table.split;
  embedding.operands[1] =
      testing::ProgramBuilder(program).state("orphan", shape, split);
  expectError(program, {"(Embedding)", "reads buffer",
                        "'orphan' on pipeline "
                        "stage 0, but no stage holds it (nothing updates it)"});
}

TEST(PipelineVerifierTest, RanksKeepToProgramOrder) {
  // Split weight gradients must follow their stage's input gradients in
  // program order, or the arena plan would not hold when W runs later.
  Program program = makePipelinedTinyProgram(2, 4, "zero-bubble");
  program.pipeline.instructionPhase[first(program, Opcode::LinearGradWeight)] =
      PipelinePhase::BackwardWeight;
  expectError(program, {"(RmsNormGrad)", "rank 1 runs it before instructions "
                        "that precede it (microbatch 0)"});
}

} // namespace
} // namespace moe::rt
