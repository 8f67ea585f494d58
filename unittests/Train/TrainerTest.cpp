//===- TrainerTest.cpp - the training loop on a hand-built artifact -------===//
#include "moe/Runtime/Train/Trainer.h"

#include "TestFiles.h"
#include "TestProgram.h"

#include "gtest/gtest.h"

#include <sstream>

using namespace moe::rt;
using moe::testing::ScratchDir;

namespace {

/// The tiny model's artifact and a flat uint16 token file it can train on.
struct TinyRun {
  ScratchDir dir;
  train::TrainOptions options;

  TinyRun() {
    std::vector<uint8_t> artifact =
        moe::rt::testing::serialize(moe::rt::testing::makeTinyProgram());
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

  void run(int64_t startStep, int64_t steps) {
    options.startStep = startStep;
    options.steps = steps;
    std::ostringstream out;
    absl::StatusOr<train::TrainSummary> summary = train::train(options, out);
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

} // namespace
