//===- BackendTest.cpp - backends by name, and the CPU one ----------------===//
#include "moe/Runtime/Backend/Backend.h"

#include "TestProgram.h"

#include "moe/Runtime/Engine/HostWeights.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstring>

using namespace moe::rt;
using ::testing::HasSubstr;

namespace {

std::shared_ptr<const Program> moeProgram() {
  return std::make_shared<const Program>(moe::rt::testing::makeMoeProgram());
}

TEST(BackendTest, UnknownNameListsTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend("tpu", moeProgram(), {});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().message(),
            "unknown device 'tpu': expected cpu or cuda");
  EXPECT_THAT(backendNames(), ::testing::ElementsAre("cpu", "cuda"));
}

TEST(BackendTest, CpuErrorsNameTheArtifact) {
  Program program = moe::rt::testing::makeMoeProgram();
  program.buffers[program.tokens].shape = {0};
  BackendOptions options;
  options.artifactPath = "model.moebin";
  absl::StatusOr<std::unique_ptr<Backend>> backend = createBackend(
      "cpu", std::make_shared<const Program>(std::move(program)), options);
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(backend.status().message(),
              HasSubstr("model.moebin: executor: invalid program"));
}

// The CPU backend is the Executor: the same weights after initialising,
// the same loss after a step, and its host copy is the step's storage.
TEST(BackendTest, CpuStepsAsTheExecutor) {
  std::shared_ptr<const Program> program = moeProgram();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend("cpu", program, {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(program);
  ASSERT_TRUE(executor.ok()) << executor.status();
  ASSERT_TRUE((*backend)->initialize(7).ok());
  (*executor)->initialize(7);
  ASSERT_NE((*backend)->hostStep(), nullptr);
  EXPECT_EQ(&(*backend)->weights(),
            static_cast<const WeightStore *>((*backend)->hostStep()));
  for (uint32_t b : (*executor)->parameters())
    EXPECT_EQ(std::memcmp((*backend)->weights().data(b), (*executor)->data(b),
                          program->buffers[b].sizeInBytes()),
              0)
        << program->buffers[b].name;
  std::vector<int32_t> tokens((*backend)->tokensPerStep());
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i % program->model.vocab);
  absl::StatusOr<StepResult> viaBackend =
      (*backend)->runStep(tokens.data(), tokens.data(), 0, {});
  absl::StatusOr<StepResult> direct =
      (*executor)->runStep(tokens.data(), tokens.data(), 0);
  ASSERT_TRUE(viaBackend.ok()) << viaBackend.status();
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(viaBackend->loss, direct->loss);
  EXPECT_EQ(viaBackend->gradNorm, direct->gradNorm);
}

// The inspection hooks for tests and tools: a buffer's bytes out, in, and
// set to a repeated word; an index out of range is refused, naming it.
TEST(BackendTest, CpuBuffersReadWriteAndFill) {
  std::shared_ptr<const Program> program = moeProgram();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend("cpu", program, {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->initialize(7).ok());
  uint32_t weight = (*backend)->weights().parameters().front();
  const Buffer &buffer = program->buffers[weight];
  std::vector<float> values(buffer.numElements());
  ASSERT_TRUE((*backend)->readBuffer(weight, values.data()).ok());
  EXPECT_EQ(std::memcmp(values.data(), (*backend)->weights().data(weight),
                        buffer.sizeInBytes()),
            0);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  ASSERT_TRUE((*backend)->writeBuffer(weight, values.data()).ok());
  EXPECT_EQ((*backend)->weights().data(weight)[values.size() - 1],
            static_cast<float>(values.size() - 1));
  ASSERT_TRUE((*backend)->fillBuffer(weight, 0x3f800000).ok());
  ASSERT_TRUE((*backend)->readBuffer(weight, values.data()).ok());
  EXPECT_THAT(values, ::testing::Each(1.0f));
  std::vector<int32_t> tokens((*backend)->tokensPerStep());
  ASSERT_TRUE((*backend)->fillBuffer(program->tokens, 5).ok());
  ASSERT_TRUE((*backend)->readBuffer(program->tokens, tokens.data()).ok());
  EXPECT_THAT(tokens, ::testing::Each(5));

  uint32_t outside = static_cast<uint32_t>(program->buffers.size());
  std::string expected =
      absl::StrCat("cpu backend: buffer ", outside,
                   " is out of range (the program has ", outside, ")");
  EXPECT_EQ((*backend)->readBuffer(outside, values.data()).message(),
            expected);
  EXPECT_EQ((*backend)->writeBuffer(outside, values.data()).message(),
            expected);
  EXPECT_EQ((*backend)->fillBuffer(outside, 0).message(), expected);
}

// fillBuffer's pattern over a size that is not a whole number of words.
TEST(BackendTest, FillPatternEndsWithTheLeadingBytes) {
  uint8_t bytes[6] = {};
  fillPattern(bytes, sizeof(bytes), 0x04030201);
  const uint8_t expected[6] = {1, 2, 3, 4, 1, 2};
  EXPECT_EQ(std::memcmp(bytes, expected, sizeof(bytes)), 0);
}

// A device backend's staging holds the weights only, initialised by the
// same rule as the CPU's.
TEST(BackendTest, HostWeightsInitialiseAsTheExecutor) {
  std::shared_ptr<const Program> program = moeProgram();
  engine::HostWeights staging(program, 0);
  engine::initializeWeights(staging, 3);
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(program);
  ASSERT_TRUE(executor.ok()) << executor.status();
  (*executor)->initialize(3);
  EXPECT_EQ(staging.parameters(), (*executor)->parameters());
  EXPECT_EQ(staging.optimizerStates(), (*executor)->optimizerStates());
  for (uint32_t b : staging.parameters())
    EXPECT_EQ(std::memcmp(staging.data(b), (*executor)->data(b),
                          program->buffers[b].sizeInBytes()),
              0)
        << program->buffers[b].name;
  EXPECT_EQ(staging.data(program->tokens), nullptr);
  EXPECT_EQ(staging.bytes(), engine::hostWeightBytes(*program));
  EXPECT_EQ(hostBytesPerRank("cuda", *program),
            engine::hostWeightBytes(*program));
  EXPECT_EQ(hostBytesPerRank("cpu", *program),
            Executor::bytesPerRank(*program));
  EXPECT_LT(hostBytesPerRank("cuda", *program),
            hostBytesPerRank("cpu", *program));
}

} // namespace
