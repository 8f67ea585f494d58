//===- SampleTokenTest.cpp - moe-run generate's choice of the next token --===//
#include "moe/Runtime/Train/Generate.h"

#include "gtest/gtest.h"

#include <cmath>
#include <vector>

using moe::rt::train::sampleToken;

namespace {

TEST(SampleTokenTest, GreedyTakesTheMostLikelyAndTheLowestIdAmongEquals) {
  std::mt19937_64 random(0);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampleToken(logits, 0.0, 0, random), 1);
  // A top-1 draw is greedy at any temperature.
  EXPECT_EQ(sampleToken(logits, 3.0, 1, random), 1);
}

// Draws follow softmax(logits / T) over the top-k. The seed is fixed, so
// the counts are too; the bound is five standard deviations of a binomial.
TEST(SampleTokenTest, DrawsFollowTheTemperedSoftmaxOverTheTopK) {
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -3.0f};
  for (auto [temperature, topK] :
       {std::pair{1.0, int64_t{0}}, std::pair{0.5, int64_t{2}}}) {
    std::vector<double> p(logits.size(), 0.0);
    double total = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      // The top-2 are ids 2 and 0.
      bool kept = topK == 0 || i == 2 || i == 0;
      p[i] = kept ? std::exp(logits[i] / temperature) : 0.0;
      total += p[i];
    }
    constexpr int kDraws = 20000;
    std::vector<int> counts(logits.size(), 0);
    std::mt19937_64 random(7);
    for (int n = 0; n < kDraws; ++n)
      ++counts[sampleToken(logits, temperature, topK, random)];
    for (size_t i = 0; i < logits.size(); ++i) {
      double expected = kDraws * p[i] / total;
      double sigma = std::sqrt(expected * (1 - p[i] / total));
      EXPECT_NEAR(counts[i], expected, 5 * sigma + 1e-9)
          << "token " << i << " at temperature " << temperature << ", top-k "
          << topK;
    }
  }
}

} // namespace
