//===- LossKernelTest.cpp - CUDA cross-entropy and aux loss vs the CPU ----===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <ostream>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

/// |actual - expected| within rtol * max(1, |expected|): the double sums
/// run in another order than the CPU's.
void expectCloseDouble(double actual, double expected, double rtol,
                       const char *what) {
  EXPECT_LE(std::fabs(actual - expected),
            rtol * std::max(1.0, std::fabs(expected)))
      << what << " is " << actual << ", expected " << expected;
}

/// Targets in [0, V), with HF's ignored -100 and ids >= V (no logit, also
/// skipped) sprinkled in.
std::vector<int32_t> targetsWithSkips(int64_t T, int64_t V, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> targets(T);
  for (int64_t t = 0; t < T; ++t) {
    if (t % 7 == 3)
      targets[t] = -100;
    else if (t % 11 == 5)
      targets[t] = static_cast<int32_t>(V + t % 3); // V, V + 1, V + 2
    else
      targets[t] = id(generator);
  }
  targets[0] = 0;
  if (T > 1)
    targets[T - 1] = static_cast<int32_t>(V - 1);
  return targets;
}

struct CrossEntropyShape {
  int64_t T, V;
};
std::ostream &operator<<(std::ostream &os, const CrossEntropyShape &shape) {
  return os << "T = " << shape.T << ", V = " << shape.V;
}

class CrossEntropyKernelTest
    : public ::testing::TestWithParam<CrossEntropyShape> {};

TEST_P(CrossEntropyKernelTest, SumsAndGradientMatchTheCpu) {
  // V not a multiple of the block; T rows beyond one wave of anything.
  const auto [T, V] = GetParam();
  std::vector<float> logits = randomValues(T * V, 11, 3.0f);
  std::vector<int32_t> targets = targetsWithSkips(T, V, 12);
  DeviceArray<float> dLogits(logits), dlogits(T * V);
  DeviceArray<int32_t> dTargets(targets);
  DeviceArray<double> sum(std::vector<double>{0.0});
  DeviceArray<unsigned long long> count(std::vector<unsigned long long>{0});

  cpu::CrossEntropySums expected =
      cpu::crossEntropySums(logits.data(), targets.data(), T, V);
  ASSERT_GT(expected.count, 0);
  if (T > 10) {
    ASSERT_LT(expected.count, T); // some rows were skipped
  }
  ASSERT_TRUE(crossEntropySums(dLogits.get(), dTargets.get(), T, V, sum.get(),
                               count.get(), nullptr)
                  .ok());
  EXPECT_EQ(count.read()[0], static_cast<unsigned long long>(expected.count));
  expectCloseDouble(sum.read()[0], expected.sum, 1e-12, "sum");

  // The scalars accumulate: a second call adds the same again.
  ASSERT_TRUE(crossEntropySums(dLogits.get(), dTargets.get(), T, V, sum.get(),
                               count.get(), nullptr)
                  .ok());
  EXPECT_EQ(count.read()[0],
            2 * static_cast<unsigned long long>(expected.count));
  expectCloseDouble(sum.read()[0], 2 * expected.sum, 1e-12, "summed twice");

  // The divisor counts every rank's targets, not only these rows'.
  const int64_t allRanks = expected.count + 29;
  const float dloss = 1.7f;
  ASSERT_TRUE(crossEntropyBackward(dloss, dLogits.get(), dTargets.get(),
                                   dlogits.get(), T, V, allRanks, nullptr)
                  .ok());
  std::vector<float> expectedGrad(T * V);
  cpu::crossEntropyBackward(dloss, logits.data(), targets.data(),
                            expectedGrad.data(), T, V, allRanks);
  std::vector<float> grad = dlogits.read();
  // The softmax terms are rounded from double as on the CPU; the target's
  // term then cancels against dloss / count, which leaves an absolute error
  // of the order of an ulp of that coefficient.
  float coefficient = dloss / static_cast<float>(allRanks);
  expectClose(grad, expectedGrad, 1e-6f, 4e-7f * coefficient, "dlogits");
  for (int64_t t = 0; t < T; ++t) {
    if (targets[t] >= 0 && targets[t] < V)
      continue;
    for (int64_t v = 0; v < V; ++v)
      ASSERT_EQ(grad[t * V + v], 0.0f) << "skipped row " << t << ", " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyKernelTest,
                         ::testing::Values(CrossEntropyShape{301, 1000},
                                           CrossEntropyShape{13, 70001},
                                           CrossEntropyShape{1, 1}));

TEST(LossKernelTest, CrossEntropyWithoutCountedTargets) {
  const int64_t T = 45, V = 300;
  std::vector<float> logits = randomValues(T * V, 13);
  std::vector<int32_t> targets(T, -100);
  targets[4] = static_cast<int32_t>(V); // no logit: skipped as well
  DeviceArray<float> dLogits(logits);
  DeviceArray<int32_t> dTargets(targets);
  DeviceArray<double> sum(std::vector<double>{0.0});
  DeviceArray<unsigned long long> count(std::vector<unsigned long long>{0});
  ASSERT_TRUE(crossEntropySums(dLogits.get(), dTargets.get(), T, V, sum.get(),
                               count.get(), nullptr)
                  .ok());
  EXPECT_EQ(count.read()[0], 0u);
  EXPECT_EQ(sum.read()[0], 0.0);

  // A count of 0 (no target on any rank) zeroes every row, even rows whose
  // target would count.
  std::vector<int32_t> counted(T, 1);
  DeviceArray<int32_t> dCounted(counted);
  DeviceArray<float> dlogits(std::vector<float>(T * V, 7.0f));
  ASSERT_TRUE(crossEntropyBackward(1.0f, dLogits.get(), dCounted.get(),
                                   dlogits.get(), T, V, 0, nullptr)
                  .ok());
  expectClose(dlogits.read(), std::vector<float>(T * V, 0.0f), 0.0f, 0.0f,
              "dlogits");
}

TEST(LossKernelTest, InvalidArguments) {
  const float *noLogits = nullptr;
  float *noDlogits = nullptr;
  EXPECT_EQ(
      crossEntropySums(noLogits, nullptr, -1, 10, nullptr, nullptr, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(crossEntropyBackward(1.0f, noLogits, nullptr, noDlogits, 4, 10, -1,
                                 nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // The BF16 forms check the same.
  const uint16_t *noBf16Logits = nullptr;
  uint16_t *noBf16Dlogits = nullptr;
  EXPECT_EQ(
      crossEntropySums(noBf16Logits, nullptr, -1, 10, nullptr, nullptr, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(crossEntropyBackward(1.0f, noBf16Logits, nullptr, noBf16Dlogits, 4,
                                 10, -1, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(auxLossStatistics(nullptr, 4, 2000, 2, nullptr, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(auxLossStatistics(nullptr, 4, 8, 9, nullptr, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(auxLossStatistics(nullptr, 4, 8, 0, nullptr, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

/// Router probabilities of T tokens over E experts (cpu::routerForward's
/// softmax), with ties planted: a uniform row, and rows whose largest
/// values repeat, so the tie rule (lower id first) decides the selection.
std::vector<float> routerProbabilities(int64_t T, int64_t E, int64_t topK,
                                       uint32_t seed) {
  std::vector<float> logits = randomValues(T * E, seed, 2.0f);
  for (int64_t e = 0; e < E; ++e)
    logits[e] = 0.5f; // token 0: all experts tie
  for (int64_t t = 1; t < T; t += 5)
    for (int64_t e = 0; e < E; e += 3)
      logits[t * E + e] = 4.0f; // a tie among the largest
  std::vector<float> probs(T * E), weights(T * topK);
  std::vector<int32_t> indices(T * topK);
  cpu::routerForward(logits.data(), probs.data(), weights.data(),
                     indices.data(), T, E, topK, 0.0f);
  return probs;
}

struct AuxLossShape {
  int64_t T, E, topK;
};
std::ostream &operator<<(std::ostream &os, const AuxLossShape &shape) {
  return os << "T = " << shape.T << ", E = " << shape.E
            << ", topK = " << shape.topK;
}

class AuxLossKernelTest : public ::testing::TestWithParam<AuxLossShape> {};

TEST_P(AuxLossKernelTest, StatisticsAndGradientMatchTheCpu) {
  const auto [T, E, topK] = GetParam();
  std::vector<float> probs = routerProbabilities(T, E, topK, 21);
  DeviceArray<float> dProbs(probs), dprobs(T * E);
  // Garbage in the outputs: both are overwritten.
  DeviceArray<unsigned long long> count(
      std::vector<unsigned long long>(E, 12345));
  DeviceArray<double> probSum(std::vector<double>(E, -3.0));
  ASSERT_TRUE(auxLossStatistics(dProbs.get(), T, E, topK, count.get(),
                                probSum.get(), nullptr)
                  .ok());
  cpu::AuxLossStatistics expected =
      cpu::auxLossStatistics(probs.data(), T, E, topK);
  std::vector<unsigned long long> gotCount = count.read();
  std::vector<double> gotProbSum = probSum.read();
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(gotCount[e], static_cast<unsigned long long>(expected.count[e]))
        << "count[" << e << "]";
    expectCloseDouble(gotProbSum[e], expected.probSum[e], 1e-12, "probSum");
  }

  // The gradient's divisor is every rank's tokens; this rank holds T.
  expected.tokens = 3 * T + 1;
  const float dloss = 0.01f;
  ASSERT_TRUE(auxLossBackward(dloss, count.get(), expected.tokens,
                              dprobs.get(), T, E, nullptr)
                  .ok());
  std::vector<float> expectedGrad(T * E);
  cpu::auxLossBackward(dloss, expected, expectedGrad.data(), T);
  // The same double expression, rounded once: equal up to an ulp.
  expectClose(dprobs.read(), expectedGrad, 1e-7f, 0.0f, "dprobs");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AuxLossKernelTest,
                         ::testing::Values(AuxLossShape{1000, 64, 4},
                                           AuxLossShape{257, 1024, 8},
                                           AuxLossShape{300, 60, 1},
                                           AuxLossShape{3, 8, 8}));

TEST(LossKernelTest, AuxLossWithoutTokens) {
  // No tokens: counts and sums are zeros; the gradient writes nothing.
  const int64_t E = 16;
  DeviceArray<float> probs(1);
  DeviceArray<unsigned long long> count(
      std::vector<unsigned long long>(E, 99));
  DeviceArray<double> probSum(std::vector<double>(E, 5.0));
  ASSERT_TRUE(auxLossStatistics(probs.get(), 0, E, 2, count.get(),
                                probSum.get(), nullptr)
                  .ok());
  EXPECT_EQ(count.read(), std::vector<unsigned long long>(E, 0));
  EXPECT_EQ(probSum.read(), std::vector<double>(E, 0.0));

  DeviceArray<float> dprobs(std::vector<float>(4 * E, 2.0f));
  ASSERT_TRUE(
      auxLossBackward(1.0f, count.get(), 0, dprobs.get(), 4, E, nullptr).ok());
  expectClose(dprobs.read(), std::vector<float>(4 * E, 2.0f), 0.0f, 0.0f,
              "dprobs");
}

} // namespace
} // namespace moe::rt::cuda
