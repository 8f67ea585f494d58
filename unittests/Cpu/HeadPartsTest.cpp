//===- HeadPartsTest.cpp - Per-head concatenation and split ---------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

constexpr int64_t kRows = 5, kHeads = 3, kA = 4, kC = 2;

TEST(HeadPartsTest, ConcatPlacesEachHeadsPartsInOrder) {
  auto a = randomVector(kRows * kHeads * kA, 1);
  auto b = randomVector(kRows * kHeads * kC, 2);
  std::vector<float> y(kRows * kHeads * (kA + kC));
  concatHeads(a.data(), b.data(), y.data(), kRows, kHeads, kA, kC, false);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t e = 0; e < kA + kC; ++e) {
        float want = e < kA ? a[(r * kHeads + h) * kA + e]
                            : b[(r * kHeads + h) * kC + e - kA];
        EXPECT_EQ(y[(r * kHeads + h) * (kA + kC) + e], want);
      }
  // The split gives both back bit for bit.
  std::vector<float> a2(a.size()), b2(b.size());
  splitHeads(y.data(), a2.data(), b2.data(), kRows, kHeads, kA, kC, false);
  EXPECT_TRUE(bitwiseEqual(a, a2));
  EXPECT_TRUE(bitwiseEqual(b, b2));
}

TEST(HeadPartsTest, SharedPartGoesToEveryHead) {
  auto a = randomVector(kRows * kHeads * kA, 3);
  auto b = randomVector(kRows * kC, 4);
  std::vector<float> y(kRows * kHeads * (kA + kC));
  concatHeads(a.data(), b.data(), y.data(), kRows, kHeads, kA, kC, true);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t e = 0; e < kC; ++e)
        EXPECT_EQ(y[(r * kHeads + h) * (kA + kC) + kA + e], b[r * kC + e]);
}

TEST(HeadPartsTest, SplitOfASharedPartIsConcatsAdjoint) {
  // <concat(a, b), y> = <a, split(y).a> + <b, split(y).b>: the split of a
  // shared part sums the heads, so it is the concatenation's gradient.
  auto a = randomVector(kRows * kHeads * kA, 5);
  auto b = randomVector(kRows * kC, 6);
  auto y = randomVector(kRows * kHeads * (kA + kC), 7);
  std::vector<float> joined(y.size()), da(a.size()), db(b.size());
  concatHeads(a.data(), b.data(), joined.data(), kRows, kHeads, kA, kC, true);
  splitHeads(y.data(), da.data(), db.data(), kRows, kHeads, kA, kC, true);
  double lhs = dotDouble(joined.data(), y.data(), y.size());
  double rhs = dotDouble(a.data(), da.data(), a.size()) +
               dotDouble(b.data(), db.data(), b.size());
  EXPECT_NEAR(lhs, rhs, 1e-5 * (1.0 + std::abs(lhs)));
}

} // namespace
