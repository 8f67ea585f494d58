//===- PipelineStepTest.cpp - steps over microbatches on one rank ---------===//
//
// Gradient accumulation: the tiny model's step over 2 or 4 microbatches of
// one row each is the step over the batch of those rows (its loss is a mean
// over tokens alone), under every schedule; and a rank holds as many
// microbatch arenas as its schedule keeps in flight.
//
//===----------------------------------------------------------------------===//

#include "LoadProgram.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Engine/Executor.h"

#include "gtest/gtest.h"

#include <cmath>

namespace moe::rt {
namespace {

using testing::load;
using testing::TinyConfig;

void expectClose(float expected, float actual, const char *what) {
  EXPECT_NEAR(actual, expected, 1e-5f * std::fabs(expected) + 1e-7f) << what;
}

void expectSameTraining(int microbatches, const std::string &schedule) {
  SCOPED_TRACE(schedule + " over " + std::to_string(microbatches));
  TinyConfig whole, part;
  whole.batch = microbatches;
  part.batch = 1;
  std::unique_ptr<Executor> reference = load(testing::makeTinyProgram(whole));
  std::unique_ptr<Executor> accumulating = load(
      testing::makePipelinedTinyProgram(1, microbatches, schedule, part));
  ASSERT_TRUE(reference && accumulating);
  ASSERT_EQ(accumulating->microbatches(), microbatches);
  ASSERT_EQ(accumulating->tokensPerStep(), reference->tokensPerStep());
  reference->initialize(7);
  accumulating->initialize(7);
  int64_t count = reference->tokensPerStep();
  std::vector<int32_t> tokens(count), targets(count);
  for (int64_t step = 0; step < 4; ++step) {
    for (int64_t i = 0; i < count; ++i) {
      tokens[i] = static_cast<int32_t>((i * 5 + step * 3 + 1) % whole.vocab);
      targets[i] = static_cast<int32_t>((i * 3 + step + 2) % whole.vocab);
    }
    absl::StatusOr<StepResult> expected =
        reference->runStep(tokens.data(), targets.data(), step);
    absl::StatusOr<StepResult> actual =
        accumulating->runStep(tokens.data(), targets.data(), step);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(actual.ok()) << actual.status();
    expectClose(expected->loss, actual->loss, "loss");
    expectClose(expected->gradNorm, actual->gradNorm, "gradient norm");
    expectClose(expected->lr, actual->lr, "learning rate");
  }
  for (uint32_t b : reference->parameters()) {
    const Buffer &buffer = reference->program().buffers[b];
    const float *want = reference->data(b);
    const float *got = accumulating->data(*accumulating->findBuffer(buffer.name));
    for (int64_t i = 0; i < buffer.numElements(); ++i)
      expectClose(want[i], got[i], buffer.name.c_str());
  }
}

TEST(PipelineStepTest, AccumulatedGradientsAreTheBatchGradients) {
  expectSameTraining(2, "1f1b");
  expectSameTraining(4, "1f1b");
  expectSameTraining(4, "gpipe");
  expectSameTraining(4, "zero-bubble");
}

TEST(PipelineStepTest, ArenasPerMicrobatchInFlight) {
  TinyConfig part;
  part.batch = 1;
  Program plain = testing::makeTinyProgram(part);
  // 1F1B on one stage finishes each microbatch before the next; GPipe holds
  // them all until the backward passes.
  std::unique_ptr<Executor> oneF =
      load(testing::makePipelinedTinyProgram(1, 4, "1f1b", part));
  std::unique_ptr<Executor> gpipe =
      load(testing::makePipelinedTinyProgram(1, 4, "gpipe", part));
  ASSERT_TRUE(oneF && gpipe);
  EXPECT_EQ(oneF->arenaBytes(), plain.arenaBytes);
  EXPECT_EQ(gpipe->arenaBytes(), 4 * plain.arenaBytes);
}

TEST(PipelineStepTest, BytesPerRankCountOwnStagesAndSlots) {
  TinyConfig config;
  config.vocab = 64;
  Program plain = testing::makeTinyProgram(config);
  uint64_t persistent = 0, embedding = 0;
  for (const Buffer &buffer : plain.buffers) {
    if (buffer.kind == BufferKind::Temporary)
      continue;
    persistent += buffer.sizeInBytes();
    if (buffer.name.rfind("model.embed_tokens.weight", 0) == 0)
      embedding += buffer.sizeInBytes(); // the weight and its two moments
  }
  // Besides its buffers, a rank holds its kernels' scratch, the same for
  // any pipeline stage.
  uint64_t plainBytes = Executor::bytesPerRank(plain);
  ASSERT_GE(plainBytes, persistent + plain.arenaBytes);
  uint64_t scratch = plainBytes - persistent - plain.arenaBytes;
  // Over two stages the embedding (and its moments) lives on rank 0 only,
  // the larger share here; rank 1 holds the rest.
  Program staged = testing::makePipelinedTinyProgram(2, 1, "1f1b", config);
  uint64_t inputs = 2 * kArenaAlignment; // one slot's tokens and targets
  EXPECT_GE(Executor::bytesPerRank(staged), embedding + scratch);
  EXPECT_LT(Executor::bytesPerRank(staged), plainBytes + inputs);
  // GPipe keeps all four microbatches' slots.
  Program gpipe = testing::makePipelinedTinyProgram(1, 4, "gpipe", config);
  EXPECT_GE(Executor::bytesPerRank(gpipe), 4 * gpipe.arenaBytes);
}

TEST(PipelineStepTest, ANonFiniteLossNamesTheMicrobatch) {
  TinyConfig part;
  part.batch = 1;
  std::unique_ptr<Executor> executor =
      load(testing::makePipelinedTinyProgram(1, 2, "1f1b", part));
  ASSERT_TRUE(executor);
  executor->initialize(7);
  float *head = executor->data(*executor->findBuffer("lm_head.weight"));
  head[0] = std::nanf("");
  std::vector<int32_t> tokens(executor->tokensPerStep(), 1);
  absl::StatusOr<StepResult> result =
      executor->runStep(tokens.data(), tokens.data(), 0);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "step 1: loss is not finite (nan) in microbatch 0");
}

} // namespace
} // namespace moe::rt
