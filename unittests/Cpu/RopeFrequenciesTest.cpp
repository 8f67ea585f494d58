//===- RopeFrequenciesTest.cpp - scaled RoPE's inverse frequencies --------===//
//
// Against HF transformers 5.25 itself: the expected values are what
// modeling_rope_utils.ROPE_INIT_FUNCTIONS gives for a head of 16 and theta
// 1e4 (printed to 9 digits; HF computes in fp32).
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/RopeFrequencies.h"

#include "gtest/gtest.h"

#include <vector>

namespace moe::rt::cpu {
namespace {

void expectFrequencies(const std::vector<double> &got,
                       const std::vector<double> &hf) {
  ASSERT_EQ(got.size(), hf.size());
  for (size_t i = 0; i < hf.size(); ++i)
    EXPECT_NEAR(got[i], hf[i], 1e-6 * hf[i]) << "pair " << i;
}

RopeScaling yarn(bool truncate, double betaFast, double betaSlow) {
  RopeScaling s;
  s.kind = RopeScalingKind::Yarn;
  s.factor = 4.0;
  s.originalMaxPositions = 64;
  s.betaFast = betaFast;
  s.betaSlow = betaSlow;
  s.truncate = truncate;
  return s;
}

TEST(RopeFrequenciesTest, UnscaledIsThetaToTheMinusTwoIOverD) {
  expectFrequencies(ropeInverseFrequencies(4, 1e4), {1.0, 0.01});
}

TEST(RopeFrequenciesTest, LinearDividesEveryFrequency) {
  RopeScaling s;
  s.kind = RopeScalingKind::Linear;
  s.factor = 4.0;
  expectFrequencies(ropeInverseFrequencies(16, 1e4, s),
                    {0.25, 0.079056941, 0.0250000004, 0.00790569466,
                     0.00249999994, 0.000790569466, 0.000250000012,
                     7.90569466e-05});
}

// Pairs 1 and 2 are on the ramp between the fast (kept) and slow
// (interpolated) ones.
TEST(RopeFrequenciesTest, YarnRampsBetweenBetaFastAndBetaSlow) {
  expectFrequencies(ropeInverseFrequencies(16, 1e4, yarn(true, 32, 1)),
                    {1.0, 0.237170815, 0.049999997, 0.00790569466,
                     0.00249999994, 0.000790569466, 0.000250000012,
                     7.90569466e-05});
}

TEST(RopeFrequenciesTest, YarnWithoutTruncationUsesTheExactRamp) {
  expectFrequencies(ropeInverseFrequencies(16, 1e4, yarn(false, 16, 2)),
                    {1.0, 0.14849025, 0.0250000004, 0.00790569466,
                     0.00249999994, 0.000790569466, 0.000250000012,
                     7.90569466e-05});
}

TEST(RopeFrequenciesTest, Llama3SmoothsTheMiddleWavelengths) {
  RopeScaling s;
  s.kind = RopeScalingKind::Llama3;
  s.factor = 8.0;
  s.originalMaxPositions = 64;
  s.lowFreqFactor = 1.0;
  s.highFreqFactor = 4.0;
  expectFrequencies(ropeInverseFrequencies(16, 1e4, s),
                    {1.0, 0.244384587, 0.0130422562, 0.00395284733,
                     0.00124999997, 0.000395284733, 0.000125000006,
                     3.95284733e-05});
}

} // namespace
} // namespace moe::rt::cpu
