//===- EmbeddingTest.cpp - Tests of the embedding lookup ------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

TEST(EmbeddingTest, ForwardCopiesRows) {
  const int64_t V = 5, H = 3, T = 4;
  auto table = randomVector(V * H, 31);
  std::vector<int32_t> tokens = {4, 0, 4, 2};
  std::vector<float> y(T * H);
  EXPECT_EQ(embeddingForward(tokens.data(), table.data(), y.data(), T, V, H),
            -1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i)
      EXPECT_EQ(y[t * H + i], table[tokens[t] * H + i]);
}

TEST(EmbeddingTest, ForwardReportsFirstBadPosition) {
  const int64_t V = 5, H = 2;
  auto table = randomVector(V * H, 32);
  std::vector<float> y(4 * H);
  std::vector<int32_t> tooLarge = {1, 2, 5, -1};
  EXPECT_EQ(embeddingForward(tooLarge.data(), table.data(), y.data(), 4, V, H),
            2);
  std::vector<int32_t> negative = {-3, 2, 7, 1};
  EXPECT_EQ(embeddingForward(negative.data(), table.data(), y.data(), 4, V, H),
            0);
}

TEST(EmbeddingTest, BackwardSumsRepeatedTokens) {
  const int64_t V = 4, H = 3, T = 5;
  std::vector<int32_t> tokens = {2, 0, 2, 2, 1};
  auto dy = randomVector(T * H, 33);
  std::vector<float> dtable(V * H, 9.0f);
  embeddingBackward(dy.data(), tokens.data(), dtable.data(), T, V, H);
  for (int64_t i = 0; i < H; ++i) {
    EXPECT_EQ(dtable[2 * H + i], dy[0 * H + i] + dy[2 * H + i] + dy[3 * H + i]);
    EXPECT_EQ(dtable[0 * H + i], dy[1 * H + i]);
    EXPECT_EQ(dtable[1 * H + i], dy[4 * H + i]);
    EXPECT_EQ(dtable[3 * H + i], 0.0f); // never looked up
  }
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferences) {
  const int64_t V = 4, H = 2, T = 6;
  std::vector<int32_t> tokens = {3, 3, 1, 3, 0, 1};
  auto table = randomVector(V * H, 34);
  auto dy = randomVector(T * H, 35);
  std::vector<float> y(T * H), dtable(V * H);
  embeddingBackward(dy.data(), tokens.data(), dtable.data(), T, V, H);
  auto loss = [&] {
    embeddingForward(tokens.data(), table.data(), y.data(), T, V, H);
    return dotDouble(dy.data(), y.data(), T * H);
  };
  EXPECT_GRADIENT("dtable", table, dtable, loss, GradCheckOptions());
}

TEST(EmbeddingTest, BackwardSkipsBadIds) {
  const int64_t V = 2, H = 1;
  std::vector<int32_t> tokens = {0, 5, -1, 1};
  std::vector<float> dy = {1.0f, 2.0f, 3.0f, 4.0f}, dtable(V * H);
  embeddingBackward(dy.data(), tokens.data(), dtable.data(), 4, V, H);
  EXPECT_EQ(dtable, (std::vector<float>{1.0f, 4.0f}));
}

} // namespace
