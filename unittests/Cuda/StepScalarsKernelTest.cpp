//===- StepScalarsKernelTest.cpp - a step's scalars and checks on the GPU -===//
//
// The one-thread kernels that keep a step's scalars on the device give the
// bits of the host's semantics:: functions; the checks keep their first
// failure; and the optimizer writes nothing once a check has failed.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/StepSemantics.h"

#include <limits>

namespace moe::rt::cuda {
namespace {

using testing::bitsOf;
using testing::DeviceArray;
using testing::randomValues;


TEST(StepScalarsKernelTest, CountTargetsAsTheHostCheck) {
  const int64_t T = 3000, V = 50;
  std::vector<int32_t> targets(T);
  for (int64_t t = 0; t < T; ++t)
    targets[t] = static_cast<int32_t>(t % 61) - 5; // some < 0, some >= V
  DeviceArray<int32_t> dTargets(targets);
  DeviceArray<unsigned long long> count(1);
  DeviceArray<int64_t> firstBad(1);
  ASSERT_TRUE(
      countTargets(dTargets.get(), T, V, count.get(), firstBad.get(), nullptr)
          .ok());
  EXPECT_EQ(count.read()[0], static_cast<unsigned long long>(
                                 cpu::crossEntropyCount(targets.data(), T, V)));
  // t % 61 - 5 >= 50 first at t = 55.
  EXPECT_EQ(firstBad.read()[0], 55);
  for (int32_t &id : targets)
    id = id >= V ? -100 : id;
  DeviceArray<int32_t> valid(targets);
  ASSERT_TRUE(
      countTargets(valid.get(), T, V, count.get(), firstBad.get(), nullptr)
          .ok());
  EXPECT_EQ(firstBad.read()[0], -1);
}

TEST(StepScalarsKernelTest, ScalarsAreTheSemanticsBits) {
  const int64_t E = 8, tokens = 4096;
  std::vector<unsigned long long> counts(E);
  std::vector<double> probSum(E);
  for (int64_t e = 0; e < E; ++e) {
    counts[e] = 1000 + 37 * e;
    probSum[e] = 511.25 + 3.1 * e;
  }
  DeviceArray<unsigned long long> dCounts(counts);
  DeviceArray<double> dProbSum(probSum);
  DeviceArray<double> sum(std::vector<double>{12345.678});
  DeviceArray<unsigned long long> counted(std::vector<unsigned long long>{977});
  DeviceArray<float> out(5);
  DeviceArray<float> norm(std::vector<float>{3.5f});
  ASSERT_TRUE(
      crossEntropyMean(sum.get(), counted.get(), out.get(), nullptr).ok());
  ASSERT_TRUE(auxLossFromStatistics(dCounts.get(), dProbSum.get(), E, tokens,
                                    out.get() + 1, nullptr)
                  .ok());
  ASSERT_TRUE(normFromSquares(dProbSum.get(), E, out.get() + 2, nullptr).ok());
  ASSERT_TRUE(clipCoefficient(1.0f, norm.get(), out.get() + 3, nullptr).ok());
  DeviceArray<float> terms(std::vector<float>{2.75f, 0.013f});
  const float *values[] = {terms.get(), terms.get() + 1};
  const float coefficients[] = {1.0f, 0.01f};
  ASSERT_TRUE(
      weightedSum(values, coefficients, 2, out.get() + 4, nullptr).ok());
  std::vector<float> got = out.read();
  std::vector<int64_t> hostCounts(counts.begin(), counts.end());
  const float termValues[] = {2.75f, 0.013f};
  float expected[] = {semantics::crossEntropyMean(12345.678, 977),
                      semantics::auxLossFromStatistics(
                          hostCounts.data(), probSum.data(), E, tokens),
                      semantics::normFromSquares(probSum.data(), E),
                      semantics::clipCoefficient(1.0f, 3.5f),
                      semantics::weightedSum(coefficients, termValues, 2)};
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(bitsOf(got[i]), bitsOf(expected[i])) << "scalar " << i;
}

TEST(StepScalarsKernelTest, DeviceScalarBackwardIsTheHostValueOnes) {
  const int64_t T = 37, V = 300, E = 6;
  std::vector<float> logits = randomValues(T * V, 5, 2.0f);
  std::vector<int32_t> targets(T);
  for (int64_t t = 0; t < T; ++t)
    targets[t] = t % 7 == 0 ? -100 : static_cast<int32_t>((t * 13) % V);
  DeviceArray<float> dLogits(logits), fromHost(T * V), fromDevice(T * V);
  DeviceArray<int32_t> dTargets(targets);
  DeviceArray<float> dloss(std::vector<float>{0.625f});
  DeviceArray<unsigned long long> count(std::vector<unsigned long long>{31});
  ASSERT_TRUE(crossEntropyBackward(0.625f, dLogits.get(), dTargets.get(),
                                   fromHost.get(), T, V, 31, nullptr)
                  .ok());
  ASSERT_TRUE(crossEntropyBackward(dloss.get(), count.get(), dLogits.get(),
                                   dTargets.get(), fromDevice.get(), T, V,
                                   nullptr)
                  .ok());
  EXPECT_EQ(fromHost.read(), fromDevice.read());

  std::vector<unsigned long long> counts = {3, 0, 9, 4, 1, 7};
  DeviceArray<unsigned long long> dCounts(counts);
  DeviceArray<float> hostAux(T * E), deviceAux(T * E);
  ASSERT_TRUE(
      auxLossBackward(0.625f, dCounts.get(), T, hostAux.get(), T, E, nullptr)
          .ok());
  ASSERT_TRUE(auxLossBackward(dloss.get(), dCounts.get(), T, deviceAux.get(), T,
                              E, nullptr)
                  .ok());
  EXPECT_EQ(hostAux.read(), deviceAux.read());
}

TEST(StepScalarsKernelTest, ChecksKeepTheFirstFailure) {
  DeviceArray<StepCheck> check(1);
  ASSERT_EQ(cudaMemset(check.get(), 0, sizeof(StepCheck)), cudaSuccess);
  DeviceArray<float> values(
      std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity()});
  DeviceArray<int32_t> ids(std::vector<int32_t>{4, 70, 90});
  DeviceArray<int64_t> none(std::vector<int64_t>{-1}),
      at(std::vector<int64_t>{1});
  // A finite value and no bad id record nothing.
  ASSERT_TRUE(recordIfNotFinite(values.get(), StepCheck::NonFiniteLoss, 3,
                                check.get(), nullptr)
                  .ok());
  ASSERT_TRUE(recordBadId(none.get(), ids.get(), StepCheck::BadToken, 0, 2, 64,
                          check.get(), nullptr)
                  .ok());
  EXPECT_EQ(check.read()[0].kind, StepCheck::Passed);
  ASSERT_TRUE(recordBadId(at.get(), ids.get(), StepCheck::BadTarget, 7, 2, 64,
                          check.get(), nullptr)
                  .ok());
  ASSERT_TRUE(recordIfNotFinite(values.get() + 1, StepCheck::NonFiniteLoss, 9,
                                check.get(), nullptr)
                  .ok());
  StepCheck found = check.read()[0];
  EXPECT_EQ(found.kind, StepCheck::BadTarget);
  EXPECT_EQ(found.instruction, 7u);
  EXPECT_EQ(found.idsBuffer, 2u);
  EXPECT_EQ(found.id, 70);
  EXPECT_EQ(found.position, 1);
  EXPECT_EQ(found.limit, 64);

  ASSERT_EQ(cudaMemset(check.get(), 0, sizeof(StepCheck)), cudaSuccess);
  ASSERT_TRUE(recordIfNotFinite(values.get() + 2, StepCheck::NonFiniteNorm, 5,
                                check.get(), nullptr)
                  .ok());
  found = check.read()[0];
  EXPECT_EQ(found.kind, StepCheck::NonFiniteNorm);
  EXPECT_EQ(found.instruction, 5u);
  EXPECT_TRUE(std::isinf(found.value));
}

TEST(StepScalarsKernelTest, OptimizerWritesNothingAfterAFailedCheck) {
  const int64_t n = 1000;
  std::vector<float> param = randomValues(n, 1), grad = randomValues(n, 2);
  std::vector<float> zeros(n, 0.0f);
  DeviceArray<float> dParam(param), dGrad(grad), m(zeros), v(zeros);
  DeviceArray<float> scale(std::vector<float>{1.0f});
  DeviceArray<uint16_t> working(n);
  ASSERT_EQ(cudaMemset(working.get(), 0, n * sizeof(uint16_t)), cudaSuccess);
  std::vector<float> history = {5.0f, 1.0f, 2.0f, 3.0f};
  DeviceArray<float> dHistory(history);
  StepCheck failed{};
  failed.kind = StepCheck::NonFiniteNorm;
  DeviceArray<StepCheck> check(std::vector<StepCheck>{failed});
  ASSERT_TRUE(adamw(dParam.get(), dGrad.get(), scale.get(), m.get(), v.get(), n,
                    1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, nullptr, working.get(),
                    check.get())
                  .ok());
  ASSERT_TRUE(
      rollAmaxHistories(dHistory.get(), 1, 4, nullptr, check.get()).ok());
  EXPECT_EQ(dParam.read(), param);
  EXPECT_EQ(m.read(), zeros);
  EXPECT_EQ(v.read(), zeros);
  EXPECT_EQ(working.read(), std::vector<uint16_t>(n, 0));
  EXPECT_EQ(dHistory.read(), history);

  // A passed check: the update happens.
  StepCheck passed{};
  DeviceArray<StepCheck> ok(std::vector<StepCheck>{passed});
  ASSERT_TRUE(adamw(dParam.get(), dGrad.get(), scale.get(), m.get(), v.get(), n,
                    1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, nullptr, working.get(),
                    ok.get())
                  .ok());
  EXPECT_NE(dParam.read(), param);
}

// Sums over ranks add the gathered rows in rank order, as
// comm::sumOverGroup does: bitwise the host's sequential sum.
TEST(StepScalarsKernelTest, RankOrderSumsAreTheHostsBits) {
  const int64_t parts = 5, n = 300;
  std::vector<double> rows(parts * n);
  std::vector<unsigned long long> counts(parts * n);
  for (int64_t i = 0; i < parts * n; ++i) {
    rows[i] = 1.0 / double(i + 3) * (i % 2 ? 1e8 : 1e-8);
    counts[i] = 1000003ull * i;
  }
  DeviceArray<double> dRows(rows), sums(n);
  DeviceArray<unsigned long long> dCounts(counts), countSums(n);
  ASSERT_TRUE(
      sumRowsInRankOrder(dRows.get(), parts, n, sums.get(), nullptr).ok());
  ASSERT_TRUE(
      sumRowsInRankOrder(dCounts.get(), parts, n, countSums.get(), nullptr)
          .ok());
  std::vector<double> gotSums = sums.read();
  std::vector<unsigned long long> gotCounts = countSums.read();
  for (int64_t i = 0; i < n; ++i) {
    double sum = rows[i];
    unsigned long long count = counts[i];
    for (int64_t r = 1; r < parts; ++r) {
      sum += rows[r * n + i];
      count += counts[r * n + i];
    }
    ASSERT_EQ(gotSums[i], sum) << i;
    ASSERT_EQ(gotCounts[i], count) << i;
  }
  // A global norm's squares of one group, packed and put back.
  std::vector<int64_t> members = {4, 0, 7};
  DeviceArray<int64_t> at(members);
  DeviceArray<double> packed(3), squares(rows);
  ASSERT_TRUE(
      gatherDoubles(dRows.get(), at.get(), 3, packed.get(), nullptr).ok());
  EXPECT_EQ(packed.read(), (std::vector<double>{rows[4], rows[0], rows[7]}));
  DeviceArray<double> twice(std::vector<double>{1.5, 2.5, 3.5});
  ASSERT_TRUE(
      scatterDoubles(twice.get(), at.get(), 3, squares.get(), nullptr).ok());
  std::vector<double> expected = rows;
  expected[4] = 1.5, expected[0] = 2.5, expected[7] = 3.5;
  EXPECT_EQ(squares.read(), expected);
}

} // namespace
} // namespace moe::rt::cuda
