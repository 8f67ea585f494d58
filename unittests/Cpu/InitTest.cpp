//===- InitTest.cpp - Tests of counter-based initialisation ---------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

TEST(InitTest, NameHashIsFnv1a64) {
  // Reference vectors of the FNV-1a 64-bit hash.
  EXPECT_EQ(nameHash(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(nameHash("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(nameHash("foobar"), 0x85944171f73967e8ULL);
  EXPECT_NE(nameHash("model.layers.0.mlp.w1"),
            nameHash("model.layers.0.mlp.w3"));
}

TEST(InitTest, NormalMoments) {
  const int64_t n = 100000;
  const float std = 0.02f;
  std::vector<float> x(n);
  initNormal(x.data(), n, std, /*seed=*/42, nameHash("lm_head.weight"));
  double sum = 0.0, sumSq = 0.0;
  int64_t withinOneSigma = 0;
  for (float v : x) {
    sum += v;
    sumSq += static_cast<double>(v) * v;
    withinOneSigma += std::fabs(v) <= std;
  }
  double mean = sum / n;
  double sd = std::sqrt(sumSq / n - mean * mean);
  // Standard errors: mean 6.3e-5, std 0.22%; fraction within 1 sigma 0.15%.
  EXPECT_NEAR(mean, 0.0, 4e-4);
  EXPECT_NEAR(sd, std, 0.01 * std);
  EXPECT_NEAR(static_cast<double>(withinOneSigma) / n, 0.6827, 0.008);
}

TEST(InitTest, ShardsAgreeWithWhole) {
  const int64_t n = 1001, split = 437;
  std::vector<float> whole(n), shards(n);
  initNormal(whole.data(), n, 1.0f, 7, 99);
  initNormal(shards.data(), split, 1.0f, 7, 99, 0);
  initNormal(shards.data() + split, n - split, 1.0f, 7, 99, split);
  EXPECT_TRUE(bitwiseEqual(whole, shards));
}

TEST(InitTest, DeterministicAndKeyed) {
  const int64_t n = 64;
  std::vector<float> a(n), b(n), otherSeed(n), otherStream(n);
  initNormal(a.data(), n, 0.02f, 1, 5);
  initNormal(b.data(), n, 0.02f, 1, 5);
  initNormal(otherSeed.data(), n, 0.02f, 2, 5);
  initNormal(otherStream.data(), n, 0.02f, 1, 6);
  EXPECT_TRUE(bitwiseEqual(a, b));
  EXPECT_FALSE(bitwiseEqual(a, otherSeed));
  EXPECT_FALSE(bitwiseEqual(a, otherStream));
  // Swapping seed and stream must not give the same numbers either.
  std::vector<float> swapped(n);
  initNormal(swapped.data(), n, 0.02f, 5, 1);
  EXPECT_FALSE(bitwiseEqual(a, swapped));
}

TEST(InitTest, StdScalesLinearly) {
  const int64_t n = 32;
  std::vector<float> one(n), two(n);
  initNormal(one.data(), n, 1.0f, 3, 4);
  initNormal(two.data(), n, 2.0f, 3, 4);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_FLOAT_EQ(two[i], 2.0f * one[i]);
}

TEST(InitTest, Fill) {
  std::vector<float> x(5, 0.0f);
  fill(x.data(), 1.0f, 5);
  EXPECT_EQ(x, std::vector<float>(5, 1.0f));
}

// A long run is drawn on several threads; each element is still a function
// of its index alone, so the run equals the same elements drawn in short
// runs (each on one thread), bit for bit, at shares' edges too.
TEST(InitTest, LongRunsOnThreadsEqualShortRuns) {
  const int64_t n = 3 * (int64_t{1} << 20) + 5, first = 7;
  std::vector<float> whole(n), pieces(n);
  initNormal(whole.data(), n, 0.02f, /*seed=*/3, nameHash("w"), first);
  const int64_t piece = 100003;
  for (int64_t k = 0; k < n; k += piece)
    initNormal(pieces.data() + k, std::min(piece, n - k), 0.02f, 3,
               nameHash("w"), first + k);
  int64_t differing = 0;
  for (int64_t k = 0; k < n; ++k)
    differing += whole[k] != pieces[k];
  EXPECT_EQ(differing, 0);
}

} // namespace
