//===- ElementwiseTest.cpp - Tests of add and SwiGLU ----------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

TEST(ElementwiseTest, AddInPlace) {
  std::vector<float> a = {1.0f, -2.0f, 3.5f}, b = {0.5f, 2.0f, -1.0f};
  add(a.data(), b.data(), a.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{1.5f, 0.0f, 2.5f}));
}

TEST(ElementwiseTest, SwigluForwardMatchesFormula) {
  const int64_t n = 33;
  auto gate = randomVector(n, 21, -6.0f, 6.0f), up = randomVector(n, 22);
  std::vector<float> y(n);
  swigluForward(gate.data(), up.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    double a = gate[i];
    double ref = a / (1.0 + std::exp(-a)) * up[i];
    EXPECT_NEAR(y[i], ref, 1e-6 * (1.0 + std::fabs(ref))) << i;
  }
}

TEST(ElementwiseTest, SwigluExtremeGatesStayFinite) {
  std::vector<float> gate = {-200.0f, 200.0f}, up = {1.0f, 1.0f};
  std::vector<float> y(2), dy = {1.0f, 1.0f}, dg(2), du(2);
  swigluForward(gate.data(), up.data(), y.data(), 2);
  swigluBackward(dy.data(), gate.data(), up.data(), dg.data(), du.data(), 2);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 200.0f);
  EXPECT_EQ(dg[0], 0.0f);
  EXPECT_EQ(dg[1], 1.0f);
  EXPECT_EQ(du[1], 200.0f);
}

TEST(ElementwiseTest, SwigluBackwardMatchesFiniteDifferences) {
  const int64_t n = 40;
  auto gate = randomVector(n, 23, -4.0f, 4.0f), up = randomVector(n, 24);
  auto dy = randomVector(n, 25);
  std::vector<float> y(n), dgate(n), dup(n);
  swigluBackward(dy.data(), gate.data(), up.data(), dgate.data(), dup.data(),
                 n);
  auto loss = [&] {
    swigluForward(gate.data(), up.data(), y.data(), n);
    return dotDouble(dy.data(), y.data(), n);
  };
  GradCheckOptions options;
  options.step = 1e-3f;
  EXPECT_GRADIENT("dgate", gate, dgate, loss, options);
  EXPECT_GRADIENT("dup", up, dup, loss, options);
}

} // namespace
