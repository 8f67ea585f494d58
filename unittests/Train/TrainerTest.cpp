//===- TrainerTest.cpp - the training loop on a hand-built artifact -------===//
#include "moe/Runtime/Train/Trainer.h"

#include "TestFiles.h"
#include "TestProgram.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <sstream>

using namespace moe::rt;
using moe::testing::ScratchDir;

namespace {

/// The tiny model's artifact and a flat uint16 token file it can train on.
struct TinyRun {
  ScratchDir dir;
  train::TrainOptions options;

  explicit TinyRun(
      const Program &program = moe::rt::testing::makeTinyProgram()) {
    std::vector<uint8_t> artifact = moe::rt::testing::serialize(program);
    moe::testing::writeBytes(dir.file("tiny.moebin"),
                             std::string(artifact.begin(), artifact.end()));
    std::string tokens;
    for (int i = 0; i < 200; ++i)
      moe::testing::appendLE<uint16_t>(tokens, (i * 5 + 1) % 8);
    moe::testing::writeBytes(dir.file("tokens.bin"), tokens);
    options.artifactPath = dir.file("tiny.moebin");
    options.dataPath = dir.file("tokens.bin");
    options.metricsPath = dir.file("metrics.jsonl");
    options.quiet = true;
  }

  int metricsLines() const {
    std::istringstream in(moe::testing::readBytes(options.metricsPath));
    int count = 0;
    for (std::string line; std::getline(in, line);)
      ++count;
    return count;
  }

  absl::StatusOr<train::TrainSummary> tryRun(int64_t startStep, int64_t steps) {
    options.startStep = startStep;
    options.steps = steps;
    std::ostringstream out;
    return train::train(options, out);
  }

  void run(int64_t startStep, int64_t steps) {
    absl::StatusOr<train::TrainSummary> summary = tryRun(startStep, steps);
    ASSERT_TRUE(summary.ok()) << summary.status();
  }
};

TEST(TrainerTest, ResumedRunAppendsToItsMetrics) {
  TinyRun run;
  run.run(/*startStep=*/0, /*steps=*/2);
  EXPECT_EQ(run.metricsLines(), 2);
  run.run(/*startStep=*/2, /*steps=*/3);
  EXPECT_EQ(run.metricsLines(), 5);
  // A run from the start begins a new file.
  run.run(/*startStep=*/0, /*steps=*/1);
  EXPECT_EQ(run.metricsLines(), 1);
}

TEST(TrainerTest, MetricsNumberStepsFromOne) {
  TinyRun run;
  run.run(/*startStep=*/0, /*steps=*/2);
  run.run(/*startStep=*/2, /*steps=*/1);
  std::istringstream in(moe::testing::readBytes(run.options.metricsPath));
  std::vector<std::string> steps;
  for (std::string line; std::getline(in, line);)
    steps.push_back(line.substr(0, line.find(',')));
  EXPECT_EQ(steps, (std::vector<std::string>{
                       "{\"step\":1", "{\"step\":2", "{\"step\":3"}));
}

TEST(TrainerTest, LossAboveTheMaximumStopsTheRun) {
  TinyRun run;
  run.options.lossLimits.maxLoss = 0.5;
  absl::StatusOr<train::TrainSummary> summary = run.tryRun(4, 3);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(summary.status().message()),
              ::testing::MatchesRegex(
                  "step 5: loss [0-9.]+ exceeds --max-loss 0\\.5"));
  // The failing step is not recorded.
  EXPECT_EQ(run.metricsLines(), 0);
}

TEST(TrainerTest, BadLossLimitsAreRefused) {
  TinyRun run;
  run.options.lossLimits.spikeWindow = 0;
  absl::StatusOr<train::TrainSummary> summary = run.tryRun(0, 1);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message(),
            "--loss-spike-window must be at least 1 step, got 0");
}

TEST(TrainerTest, PartitionedArtifactNeedsItsRanks) {
  TinyRun run(moe::rt::testing::makeMeshProgram({2, 2}));
  absl::StatusOr<train::TrainSummary> summary = run.tryRun(0, 1);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(summary.status().message(),
            run.options.artifactPath +
                ": the artifact is partitioned over 4 ranks (dp=2 x tp=2), "
                "this job has 1: start it with mpirun -np 4");
}

TEST(TrainerTest, WholeTensorFeaturesWaitForOneRank) {
  const std::pair<std::string train::TrainOptions::*, const char *> cases[] = {
      {&train::TrainOptions::savePath, "saving weights (--save)"},
      {&train::TrainOptions::dumpStepDir, "dumping a step (--dump-step)"}};
  for (auto [field, what] : cases) {
    TinyRun run(moe::rt::testing::makeMeshProgram({2, 1}));
    run.options.*field = run.dir.file("weights");
    absl::StatusOr<train::TrainSummary> summary = run.tryRun(0, 1);
    ASSERT_FALSE(summary.ok());
    EXPECT_EQ(summary.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(summary.status().message(),
              std::string(what) + " is not supported with 2 ranks yet");
  }
}

TEST(TrainerTest, OneRankMeshArtifactTrains) {
  // A 1 x 1 mesh: its collectives are groups of one, its rows the batch.
  TinyRun run(moe::rt::testing::makeMeshProgram({1, 1}));
  run.run(/*startStep=*/0, /*steps=*/3);
  EXPECT_EQ(run.metricsLines(), 3);
}

} // namespace
