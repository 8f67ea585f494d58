//===- LossGuardTest.cpp - the loss ceiling and the spike detector --------===//
#include "moe/Runtime/Train/LossGuard.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <limits>

using namespace moe::rt::train;
using ::testing::HasSubstr;

namespace {

/// Feeds `losses` from 0-based step 0 on; returns the first error (OK if
/// none) and the warnings in `warnings`.
absl::Status feed(LossGuard &guard, const std::vector<double> &losses,
                  std::vector<std::string> *warnings = nullptr) {
  for (size_t step = 0; step < losses.size(); ++step) {
    std::string warning;
    if (absl::Status s = guard.check(step, losses[step], &warning); !s.ok())
      return s;
    if (warnings && !warning.empty())
      warnings->push_back(warning);
  }
  return absl::OkStatus();
}

TEST(LossGuardTest, DefaultCeilingIsTenTimesLnVocab) {
  EXPECT_DOUBLE_EQ(defaultMaxLoss(256), 10 * std::log(256.0));
  EXPECT_EQ(defaultMaxLoss(1), 0);
  LossGuard guard(LossLimits{}, 256);
  EXPECT_DOUBLE_EQ(guard.maxLoss(), 10 * std::log(256.0));
  EXPECT_TRUE(feed(guard, {5.5, 20.0, 55.4}).ok());
  std::string warning;
  absl::Status status = guard.check(3, 56.0, &warning);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "step 4: loss 56 exceeds the maximum 55.45 (10 x ln(vocab 256), "
            "the default of --max-loss; 0 disables it)");
}

TEST(LossGuardTest, ExplicitCeilingNamesTheFlagAndTheStep) {
  LossLimits limits;
  limits.maxLoss = 1e6;
  LossGuard guard(limits, 256);
  absl::Status status = feed(guard, {5.0, 4.0, 3.4e13});
  EXPECT_EQ(status.message(), "step 3: loss 3.4e+13 exceeds --max-loss 1e+06");
}

TEST(LossGuardTest, ZeroOrInfinityDisablesTheCeiling) {
  for (double off : {0.0, std::numeric_limits<double>::infinity()}) {
    LossLimits limits;
    limits.maxLoss = off;
    LossGuard guard(limits, 256);
    EXPECT_EQ(guard.maxLoss(), 0);
    EXPECT_TRUE(feed(guard, {5.0, 3.4e13}).ok());
  }
}

TEST(LossGuardTest, SpikeAgainstTheMedianOfAFullWindow) {
  LossLimits limits;
  limits.maxLoss = 0;
  limits.spikeFactor = 3;
  limits.spikeWindow = 4;
  LossGuard guard(limits, 256);
  // Not judged before the window is full; the median of {4, 3, 100, 2} is
  // 3.5, so 100 (step 3) was no spike and 10.4 is none either.
  EXPECT_TRUE(feed(guard, {4.0, 3.0, 100.0, 2.0, 10.4}).ok());
  std::string warning;
  // The window is now {3, 100, 2, 10.4}: median 6.7; 20.1 is not above 3x.
  EXPECT_TRUE(guard.check(5, 20.1, &warning).ok());
  // {100, 2, 10.4, 20.1}: median 15.25.
  absl::Status status = guard.check(6, 46.0, &warning);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "step 7: loss 46 is a spike: 3.02 times the median 15.25 of the "
            "previous 4 steps (--loss-spike-factor 3)");
}

TEST(LossGuardTest, WarnModeGoesOn) {
  LossLimits limits;
  limits.spikeFactor = 2;
  limits.spikeWindow = 1;
  limits.spikeAction = LossSpikeAction::Warn;
  LossGuard guard(limits, 256);
  std::vector<std::string> warnings;
  EXPECT_TRUE(feed(guard, {2.0, 5.0, 5.5, 12.0}, &warnings).ok());
  EXPECT_THAT(warnings,
              ::testing::ElementsAre(
                  "step 2: loss 5 is a spike: 2.5 times the median 2 of the "
                  "previous 1 step (--loss-spike-factor 2)",
                  "step 4: loss 12 is a spike: 2.18 times the median 5.5 of "
                  "the previous 1 step (--loss-spike-factor 2)"));
}

TEST(LossGuardTest, LimitsAreValidated) {
  EXPECT_TRUE(validateLossLimits(LossLimits{}).ok());
  auto messageOf = [](LossLimits limits) {
    return std::string(validateLossLimits(limits).message());
  };
  LossLimits negative;
  negative.maxLoss = -1;
  EXPECT_EQ(messageOf(negative),
            "--max-loss must be >= 0 (0 or inf disables the check), got -1");
  LossLimits notANumber;
  notANumber.maxLoss = std::nan("");
  EXPECT_THAT(messageOf(notANumber), HasSubstr("got nan"));
  for (double factor : {-1.0, 0.5, 1.0,
                        std::numeric_limits<double>::infinity()}) {
    LossLimits limits;
    limits.spikeFactor = factor;
    EXPECT_THAT(messageOf(limits),
                HasSubstr("--loss-spike-factor must be 0 (off) or a finite "
                          "number above 1"))
        << factor;
  }
  LossLimits window;
  window.spikeWindow = 0;
  EXPECT_EQ(messageOf(window),
            "--loss-spike-window must be at least 1 step, got 0");
}

} // namespace
