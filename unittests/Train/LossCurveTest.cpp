//===- LossCurveTest.cpp - the text chart of a loss curve -----------------===//
#include "moe/Runtime/Train/Trainer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <sstream>

using namespace moe::rt::train;
using ::testing::HasSubstr;

namespace {

std::vector<std::string> lines(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

TEST(LossCurveTest, FallingCurveGoesFromTopLeftToBottomRight) {
  std::vector<double> losses = {4.0, 3.0, 2.0, 1.0};
  std::vector<std::string> chart = lines(plotLossCurve(losses, 60, 4));
  ASSERT_EQ(chart.size(), 1u + 4u + 2u);
  EXPECT_EQ(chart[0], "loss curve (4 steps)");
  EXPECT_EQ(chart[1], "   4.000 |*   ");
  EXPECT_EQ(chart[4], "   1.000 |   *");
  EXPECT_EQ(chart[5], "         +----");
}

TEST(LossCurveTest, ManyStepsAreAveragedPerColumn) {
  // 100 steps into 10 columns: each column is the mean of 10 steps.
  std::vector<double> losses;
  for (int i = 0; i < 100; ++i)
    losses.push_back(i < 50 ? 2.0 : 1.0);
  std::vector<std::string> chart = lines(plotLossCurve(losses, 10, 2));
  EXPECT_EQ(chart[1], "   2.000 |*****     ");
  EXPECT_EQ(chart[2], "   1.000 |     *****");
  // The axis runs over the step numbers, the first step being step 1.
  EXPECT_EQ(chart.back(), "          1      100");
}

TEST(LossCurveTest, AxisOfAResumedRunStartsAtItsFirstStep) {
  std::vector<double> losses(100, 1.0);
  losses[0] = 2.0;
  std::vector<std::string> chart =
      lines(plotLossCurve(losses, 10, 2, /*firstStepNumber=*/11));
  EXPECT_EQ(chart.back(), "          11     110");
}

TEST(LossCurveTest, FlatOrEmptyCurvesDoNotDivideByZero) {
  EXPECT_EQ(plotLossCurve({}), "");
  std::vector<std::string> chart = lines(plotLossCurve({3.0, 3.0, 3.0}, 60, 3));
  ASSERT_EQ(chart.size(), 1u + 3u + 2u);
  EXPECT_THAT(chart[3], HasSubstr("***"));
}

TEST(LossCurveTest, NonFiniteLossesAreLeftOut) {
  // The NaN and infinity neither move the scale nor get a mark; the
  // column of the NaN alone stays empty.
  std::vector<double> losses = {4.0, NAN, INFINITY, 1.0};
  std::vector<std::string> chart = lines(plotLossCurve(losses, 60, 4));
  ASSERT_EQ(chart.size(), 1u + 4u + 2u);
  EXPECT_EQ(chart[0], "loss curve (4 steps)");
  EXPECT_EQ(chart[1], "   4.000 |*   ");
  EXPECT_EQ(chart[2], "         |    ");
  EXPECT_EQ(chart[3], "         |    ");
  EXPECT_EQ(chart[4], "   1.000 |   *");
  // Averaged columns use the finite steps only: (2 + 4) / 2 and 1.
  chart = lines(plotLossCurve({2.0, -INFINITY, 4.0, 1.0, NAN, 1.0}, 2, 2));
  EXPECT_EQ(chart[1], "   3.000 |* ");
  EXPECT_EQ(chart[2], "   1.000 | *");
}

TEST(LossCurveTest, NoFiniteLossGivesNoChart) {
  EXPECT_EQ(plotLossCurve({NAN, INFINITY, -INFINITY}), "");
}

} // namespace
