//===- LossCurveTest.cpp - the text chart of a loss curve -----------------===//
#include "moe/Runtime/Train/Trainer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
  EXPECT_THAT(chart.back(), HasSubstr("99"));
}

TEST(LossCurveTest, FlatOrEmptyCurvesDoNotDivideByZero) {
  EXPECT_EQ(plotLossCurve({}), "");
  std::vector<std::string> chart = lines(plotLossCurve({3.0, 3.0, 3.0}, 60, 3));
  ASSERT_EQ(chart.size(), 1u + 3u + 2u);
  EXPECT_THAT(chart[3], HasSubstr("***"));
}

} // namespace
