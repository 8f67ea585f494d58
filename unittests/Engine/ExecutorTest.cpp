//===- ExecutorTest.cpp - storage, initialisation, errors and hooks -------===//

#include "MeshChecks.h"
#include "TestProgram.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Artifact/Seal.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/Executor.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>

namespace moe::rt {
namespace {

using ::testing::HasSubstr;
using testing::makeBf16TinyProgram;
using testing::makeMoeProgram;
using testing::makeTinyProgram;
using testing::TinyConfig;

std::unique_ptr<Executor> makeExecutor(Program program) {
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program));
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? std::move(*executor) : nullptr;
}

/// A batch of in-vocabulary tokens with next-token targets.
struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch makeBatch(int64_t count, int64_t vocab, uint32_t seed = 0) {
  Batch batch;
  for (int64_t i = 0; i < count; ++i) {
    batch.tokens.push_back(static_cast<int32_t>((i * 5 + 3 + seed) % vocab));
    batch.targets.push_back(static_cast<int32_t>((i * 5 + 8 + seed) % vocab));
  }
  return batch;
}

TEST(ExecutorTest, ThePlannedWorkspaceCountsTheKernelThreads) {
  // docs/memory.md: attention keeps one block of tiles per kernel thread,
  // and the runtime's plan counts the threads it runs with.
  Program program;
  testing::ProgramBuilder b(program);
  int64_t B = 1, S = 8, heads = 2, kvHeads = 1, headDim = 16;
  int64_t Q = heads * headDim, KV = kvHeads * headDim;
  uint32_t dout = b.temporary("dout", {B, S, Q}),
           q = b.temporary("q", {B, S, Q});
  uint32_t k = b.temporary("k", {B, S, KV}), v = b.temporary("v", {B, S, KV});
  uint32_t out = b.temporary("out", {B, S, Q});
  uint32_t lse = b.temporary("lse", {B, heads, S});
  uint32_t dq = b.temporary("dq", {B, S, Q}),
           dk = b.temporary("dk", {B, S, KV});
  uint32_t dv = b.temporary("dv", {B, S, KV});
  b.emit(Opcode::AttentionGrad, {dout, q, k, v, out, lse}, {dq, dk, dv},
         {heads, kvHeads});
  int before = cpu::numThreads();
  cpu::setNumThreads(1);
  uint64_t one = Executor::bytesPerRank(program);
  cpu::setNumThreads(4);
  uint64_t four = Executor::bytesPerRank(program);
  cpu::setNumThreads(before);
  EXPECT_EQ(four - one, 3 * cpu::attentionWorkspaceBytes(headDim, true));
}

TEST(ExecutorTest, RejectsAnInvalidProgram) {
  Program program = makeTinyProgram();
  program.instructions[2].operands[1] = 999;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program));
  ASSERT_FALSE(executor.ok());
  EXPECT_THAT(std::string(executor.status().message()),
              HasSubstr("executor: invalid program: instruction 2 (Linear)"));
}

// Document positions are each token's position in a document that starts
// in the row: a position that is neither 0 nor the previous one + 1 is an
// error naming the instruction and the token, not a read outside the
// keys; a step without positions is refused before it starts.
TEST(ExecutorTest, DocumentPositionsAreChecked) {
  testing::MoeConfig config;
  config.documentMasking = true;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(makeMoeProgram(config));
  ASSERT_TRUE(executor.ok()) << executor.status();
  (*executor)->initialize(3);
  int64_t count = (*executor)->tokensPerStep();
  std::vector<int32_t> tokens(count, 1), positions(count, 0);
  absl::StatusOr<StepResult> missing =
      (*executor)->runStep(tokens.data(), tokens.data(), 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("missing the tokens' document positions"));
  EXPECT_TRUE(
      (*executor)
          ->runStep(tokens.data(), tokens.data(), 0, {}, positions.data())
          .ok());
  positions[3] = 7;
  absl::StatusOr<StepResult> bad = (*executor)->runStep(
      tokens.data(), tokens.data(), 1, {}, positions.data());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("(DocumentRope)"));
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("document position 7 at "));
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(" is neither 0 nor the previous token's + 1"));
}

TEST(ExecutorTest, PartitionedProgramNeedsAWorldOfItsSize) {
  for (bool withWorld : {false, true}) {
    absl::StatusOr<std::unique_ptr<comm::World>> world = comm::World::local();
    ASSERT_TRUE(world.ok()) << world.status();
    absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::create(
        testing::makeMeshProgram({2, 2}), withWorld ? world->get() : nullptr);
    ASSERT_FALSE(executor.ok());
    EXPECT_EQ(executor.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(executor.status().message(),
              "the artifact is partitioned over 4 ranks (dp=2 x tp=2), this "
              "job has 1: start it with mpirun -np 4");
  }
}

TEST(ExecutorTest, OneRankProgramsTakeAnOptionalWorld) {
  absl::StatusOr<std::unique_ptr<comm::World>> world = comm::World::local();
  ASSERT_TRUE(world.ok()) << world.status();
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(makeTinyProgram(), world->get());
  ASSERT_TRUE(executor.ok()) << executor.status();
  EXPECT_EQ((*executor)->rank(), 0);
  EXPECT_EQ((*executor)->numRanks(), 1);
  EXPECT_TRUE((*executor)->coordinates().empty());
  EXPECT_EQ((*executor)->batchBlock().index, 0);
  EXPECT_EQ((*executor)->batchBlock().count, 1);
}

TEST(ExecutorTest, OneRankMeshRunsItsCollectivesWithoutAWorld) {
  // Groups of one: gathers and reductions are copies, and the grouped
  // losses and norm equal the single-rank kernels on the same batch.
  testing::checkMeshStep({1, 1}, nullptr);
}

TEST(ExecutorTest, ReportsAnArenaThatCannotBeAllocated) {
  Program program = makeTinyProgram();
  program.arenaBytes = uint64_t(1) << 62;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program));
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(executor.status().message()),
              HasSubstr("for the temporary arena"));
}

TEST(ExecutorTest, StorageSizesAndAlignment) {
  TinyConfig config;
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram(config));
  ASSERT_TRUE(executor);
  uint64_t params = (2 * config.vocab * config.hidden + config.hidden) * 4;
  EXPECT_EQ(executor->totalParameterBytes(), params);
  EXPECT_EQ(executor->optimizerStateBytes(), 2 * params);
  EXPECT_EQ(executor->arenaBytes(), executor->program().arenaBytes);
  EXPECT_EQ(executor->tokensPerStep(), config.batch * config.seq);
  for (uint32_t b = 0; b < executor->program().buffers.size(); ++b) {
    const void *address = executor->program().buffers[b].dtype == DType::F32
                              ? static_cast<const void *>(executor->data(b))
                              : static_cast<const void *>(executor->ids(b));
    ASSERT_NE(address, nullptr) << b;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(address) % 64, 0u) << b;
  }
}

TEST(ExecutorTest, AccessByIndexAndName) {
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram());
  ASSERT_TRUE(executor);
  const Program &program = executor->program();
  std::optional<uint32_t> head = executor->findBuffer("lm_head.weight");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(program.buffers[*head].name, "lm_head.weight");
  EXPECT_TRUE(executor->findBuffer("lm_head.weight.exp_avg_sq").has_value());
  EXPECT_EQ(executor->findBuffer("tokens"), program.tokens);
  // Temporaries are not addressable by name: their names are debug labels.
  EXPECT_FALSE(executor->findBuffer("logits").has_value());
  EXPECT_FALSE(executor->findBuffer("nope").has_value());

  std::vector<std::string> names;
  for (uint32_t b : executor->parameters())
    names.push_back(program.buffers[b].name);
  EXPECT_THAT(names,
              ::testing::ElementsAre("model.embed_tokens.weight",
                                     "model.norm.weight", "lm_head.weight"));
  EXPECT_EQ(executor->optimizerStates().size(), 6u);

  EXPECT_EQ(executor->data(program.tokens), nullptr); // i32
  EXPECT_EQ(executor->ids(*head), nullptr);           // f32
  EXPECT_EQ(executor->data(100000), nullptr);
}

TEST(ExecutorTest, InitializesFromTheInitKinds) {
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram());
  ASSERT_TRUE(executor);
  // Make the optimizer state dirty, so that zeroing is observable.
  for (uint32_t b : executor->optimizerStates())
    executor->data(b)[0] = 5.0f;
  executor->initialize(42);

  uint32_t head = *executor->findBuffer("lm_head.weight");
  int64_t count = executor->program().buffers[head].numElements();
  std::vector<float> expected(count);
  cpu::initNormal(expected.data(), count, 0.02f, 42,
                  cpu::nameHash("lm_head.weight"), 0);
  EXPECT_EQ(
      std::vector<float>(executor->data(head), executor->data(head) + count),
      expected);

  uint32_t norm = *executor->findBuffer("model.norm.weight");
  for (int64_t i = 0; i < executor->program().buffers[norm].numElements(); ++i)
    EXPECT_EQ(executor->data(norm)[i], 1.0f);
  for (uint32_t b : executor->optimizerStates())
    for (int64_t i = 0; i < executor->program().buffers[b].numElements(); ++i)
      ASSERT_EQ(executor->data(b)[i], 0.0f);

  // Different parameters draw different streams; the seed changes them.
  uint32_t embed = *executor->findBuffer("model.embed_tokens.weight");
  EXPECT_NE(executor->data(embed)[0], executor->data(head)[0]);
  executor->initialize(43);
  EXPECT_NE(executor->data(head)[0], expected[0]);
  // initialize() uses the artifact's seed.
  executor->initialize();
  std::vector<float> fromProgram(count);
  cpu::initNormal(fromProgram.data(), count, 0.02f, executor->program().seed,
                  cpu::nameHash("lm_head.weight"));
  EXPECT_EQ(executor->data(head)[3], fromProgram[3]);
}

TEST(ExecutorTest, BadTokenIdNamesTheInstructionAndPosition) {
  TinyConfig config;
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram(config));
  ASSERT_TRUE(executor);
  executor->initialize();
  Batch batch = makeBatch(executor->tokensPerStep(), config.vocab);
  batch.tokens[5] = 99;
  absl::StatusOr<StepResult> result =
      executor->runStep(batch.tokens.data(), batch.targets.data(), 3);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("step 4: instruction 0 (Embedding) at tiny.mlir:1: "
                        "token id 99 at position 5 (batch 1, seq 1) is "
                        "outside the embedding table [0, 8)"));
  batch.tokens[5] = -1;
  result = executor->runStep(batch.tokens.data(), batch.targets.data(), 3);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("token id -1"));
}

TEST(ExecutorTest, BadTargetIsAnErrorNegativeIsIgnored) {
  TinyConfig config;
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram(config));
  ASSERT_TRUE(executor);
  executor->initialize();
  Batch batch = makeBatch(executor->tokensPerStep(), config.vocab);
  batch.targets[2] = -100;
  absl::StatusOr<StepResult> result =
      executor->runStep(batch.tokens.data(), batch.targets.data(), 0);
  EXPECT_TRUE(result.ok()) << result.status();
  batch.targets[6] = 8;
  result = executor->runStep(batch.tokens.data(), batch.targets.data(), 1);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("step 2: instruction 3 (CrossEntropy) at tiny.mlir:4: "
                        "target id 8 at position 6 (batch 1, seq 2) is "
                        "outside the vocabulary [0, 8)"));
}

TEST(ExecutorTest, StepOutOfRange) {
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram());
  ASSERT_TRUE(executor);
  Batch batch = makeBatch(executor->tokensPerStep(), 8);
  absl::StatusOr<StepResult> result =
      executor->runStep(batch.tokens.data(), batch.targets.data(), -1);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("step -1 is outside [0, 2147483647]"));
  result = executor->runStep(nullptr, batch.targets.data(), 0);
  EXPECT_FALSE(result.ok());
}

TEST(ExecutorTest, NonFiniteLossStopsBeforeTheOptimizer) {
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram());
  ASSERT_TRUE(executor);
  executor->initialize();
  uint32_t head = *executor->findBuffer("lm_head.weight");
  uint32_t embed = *executor->findBuffer("model.embed_tokens.weight");
  executor->data(head)[0] = NAN;
  float embedBefore = executor->data(embed)[0];
  std::vector<size_t> ran;
  StepHooks hooks;
  hooks.afterInstruction = [&](size_t index, const Instruction &) {
    ran.push_back(index);
  };
  Batch batch = makeBatch(executor->tokensPerStep(), 8);
  absl::StatusOr<StepResult> result =
      executor->runStep(batch.tokens.data(), batch.targets.data(), 4, hooks);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("step 5: loss is not finite (nan)"));
  // Stopped right after CrossEntropy: no AdamW touched the weights.
  EXPECT_EQ(ran.back(), testing::instructionWith(executor->program(),
                                                 Opcode::CrossEntropy));
  EXPECT_EQ(executor->data(embed)[0], embedBefore);
}

TEST(ExecutorTest, NonFiniteGradientNormIsAnError) {
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram());
  ASSERT_TRUE(executor);
  executor->initialize();
  // The embedding row of an unused token does not affect the loss, but a
  // huge norm weight overflows the gradients.
  uint32_t norm = *executor->findBuffer("model.norm.weight");
  for (int i = 0; i < 4; ++i)
    executor->data(norm)[i] = 3e38f;
  Batch batch = makeBatch(executor->tokensPerStep(), 8);
  absl::StatusOr<StepResult> result =
      executor->runStep(batch.tokens.data(), batch.targets.data(), 0);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(
      std::string(result.status().message()),
      ::testing::AnyOf(HasSubstr("step 1: loss is not finite"),
                       HasSubstr("step 1: gradient norm is not finite")));
}

TEST(ExecutorTest, HooksAreCalledInOrder) {
  std::unique_ptr<Executor> executor = makeExecutor(makeTinyProgram());
  ASSERT_TRUE(executor);
  executor->initialize();
  const Program &program = executor->program();
  std::vector<std::pair<char, size_t>> calls;
  // Gradients as AdamW is about to consume them.
  double sumOfSquares = 0;
  StepHooks hooks;
  hooks.beforeInstruction = [&](size_t index, const Instruction &instruction) {
    EXPECT_EQ(&instruction, &program.instructions[index]);
    calls.push_back({'b', index});
    if (instruction.opcode == Opcode::AdamW) {
      uint32_t grad = instruction.operands[1];
      sumOfSquares += cpu::sumOfSquares(executor->data(grad),
                                        program.buffers[grad].numElements());
    }
  };
  hooks.afterInstruction = [&](size_t index, const Instruction &) {
    calls.push_back({'a', index});
  };
  Batch batch = makeBatch(executor->tokensPerStep(), 8);
  absl::StatusOr<StepResult> result =
      executor->runStep(batch.tokens.data(), batch.targets.data(), 0, hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(calls.size(), 2 * program.instructions.size());
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    EXPECT_EQ(calls[2 * i], std::make_pair('b', i));
    EXPECT_EQ(calls[2 * i + 1], std::make_pair('a', i));
  }
  // The gradients seen by the hooks are the ones the norm was taken of.
  EXPECT_NEAR(std::sqrt(sumOfSquares), result->gradNorm,
              1e-5 * result->gradNorm);
  EXPECT_GT(result->gradNorm, 0.0f);
}

/// Edited artifacts that still verify must run (or fail with a status)
/// without reading or writing outside their buffers. The edits are sealed
/// again, as a writer with a bug would seal them, so that they get past the
/// checksum to the verifier and the executor.
TEST(ExecutorTest, VerifiedByteFlippedArtifactsRunSafely) {
  std::vector<uint8_t> bytes = testing::serialize(makeMoeProgram());
  int ran = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> damaged = bytes;
    damaged[rng() % (damaged.size() - artifact::kSealSize)] ^=
        static_cast<uint8_t>(1 + rng() % 255);
    testing::reseal(damaged);
    absl::StatusOr<Program> program =
        parseArtifact(damaged.data(), damaged.size(), "damaged");
    // A flipped high byte of arena_bytes can still verify; do not let the
    // test allocate gigabytes for it.
    if (!program.ok() || program->arenaBytes > (uint64_t(64) << 20))
      continue;
    absl::StatusOr<std::unique_ptr<Executor>> executor =
        Executor::create(std::move(*program));
    if (!executor.ok())
      continue;
    (*executor)->initialize();
    Batch batch = makeBatch((*executor)->tokensPerStep(), 11, seed);
    (void)(*executor)->runStep(batch.tokens.data(), batch.targets.data(), 0);
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

/// Mixed precision: the step reads BF16 working copies of the masters.
/// AdamW writes master and copy together, so a step does not redo the
/// copies unless a master was handed out for writing since the last one.
struct WorkingCopies {
  TinyConfig config;
  std::unique_ptr<Executor> executor =
      makeExecutor(makeBf16TinyProgram(config));
  Batch batch = makeBatch(executor->tokensPerStep(), config.vocab);

  float step(int64_t index) {
    absl::StatusOr<StepResult> result =
        executor->runStep(batch.tokens.data(), batch.targets.data(), index);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->loss : NAN;
  }
  uint32_t buffer(const char *name) { return *executor->findBuffer(name); }
  /// Halves the head's master through data(), as a load does.
  void halveHead() {
    uint32_t head = buffer("lm_head.weight");
    float *values = executor->data(head);
    for (int64_t i = 0; i < executor->program().buffers[head].numElements();
         ++i)
      values[i] *= 0.5f;
  }
};

TEST(ExecutorTest, AStepReadsMastersWrittenSinceTheLastStep) {
  WorkingCopies written, refreshed;
  ASSERT_TRUE(written.executor && refreshed.executor);
  for (WorkingCopies *run : {&written, &refreshed}) {
    run->executor->initialize();
    run->step(0);
    run->halveHead();
  }
  ASSERT_TRUE(refreshed.executor->refreshWorkingCopies().ok());
  float loss = written.step(1);
  EXPECT_EQ(loss, refreshed.step(1));
  // And the halved head is what both read: a run left alone differs.
  WorkingCopies untouched;
  untouched.executor->initialize();
  untouched.step(0);
  EXPECT_NE(loss, untouched.step(1));
}

TEST(ExecutorTest, AStepDoesNotRederiveCopiesTheOptimizerWrote) {
  WorkingCopies run, control;
  ASSERT_TRUE(run.executor && control.executor);
  for (WorkingCopies *each : {&run, &control}) {
    each->executor->initialize();
    each->step(0);
  }
  // Zeroing a copy (not a master) is seen by the next step: the step does
  // not round the masters into the copies again.
  uint32_t copy = run.buffer("lm_head.weight.bf16");
  std::memset(run.executor->bytes(copy), 0,
              run.executor->program().buffers[copy].sizeInBytes());
  EXPECT_NE(run.step(1), control.step(1));
}

} // namespace
} // namespace moe::rt
