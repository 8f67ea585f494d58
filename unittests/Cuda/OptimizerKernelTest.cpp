//===- OptimizerKernelTest.cpp - CUDA gradient norm and AdamW vs the CPU --===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <memory>
#include <ostream>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

TEST(OptimizerKernelTest, SumOfSquaresMatchesTheCpu) {
  for (int64_t n : {1, 255, 100003, 1000003}) {
    SCOPED_TRACE(n);
    std::vector<float> g = randomValues(n, 31, 0.1f);
    DeviceArray<float> dg(g);
    DeviceArray<double> sum(std::vector<double>{0.0});
    ASSERT_TRUE(sumOfSquares(dg.get(), n, sum.get(), nullptr).ok());
    double expected = cpu::sumOfSquares(g.data(), n);
    // Exact squares summed in another order: a few ulps of the total.
    EXPECT_NEAR(sum.read()[0], expected, 1e-13 * expected);

    // The sum accumulates: the executor adds every parameter's gradient.
    ASSERT_TRUE(sumOfSquares(dg.get(), n, sum.get(), nullptr).ok());
    EXPECT_NEAR(sum.read()[0], 2 * expected, 2e-13 * expected);
  }
  DeviceArray<double> sum(std::vector<double>{1.5});
  ASSERT_TRUE(sumOfSquares(nullptr, 0, sum.get(), nullptr).ok());
  EXPECT_EQ(sum.read()[0], 1.5);
  EXPECT_EQ(sumOfSquares(nullptr, -1, sum.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

struct AdamwCase {
  float weightDecay;
  float gradScale; // the clipping coefficient; 1 when not clipping
};
std::ostream &operator<<(std::ostream &os, const AdamwCase &c) {
  return os << "weightDecay = " << c.weightDecay
            << ", gradScale = " << c.gradScale;
}

class AdamwKernelTest : public ::testing::TestWithParam<AdamwCase> {};

// Steps 0 to 5 from zero moments, fresh gradients each step, the CPU
// updating its own copy of the state as Dispatch's adamwScaled does.
TEST_P(AdamwKernelTest, StepsMatchTheCpu) {
  const auto [weightDecay, gradScale] = GetParam();
  const int64_t n = 100003; // not a multiple of a block
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  std::vector<float> param = randomValues(n, 41);
  std::vector<float> expAvg(n, 0.0f), expAvgSq(n, 0.0f);
  DeviceArray<float> dParam(param), dExpAvg(expAvg), dExpAvgSq(expAvgSq);
  DeviceArray<float> dScale(std::vector<float>{gradScale});
  for (int64_t step = 0; step <= 5; ++step) {
    SCOPED_TRACE(step);
    std::vector<float> grad = randomValues(n, 50 + step, 0.5f);
    DeviceArray<float> dGrad(grad);
    ASSERT_TRUE(adamw(dParam.get(), dGrad.get(), dScale.get(), dExpAvg.get(),
                      dExpAvgSq.get(), n, lr, beta1, beta2, eps, weightDecay,
                      step, nullptr)
                    .ok());
    // adamwScaled: the gradient times the coefficient in fp32, unless the
    // coefficient is 1.
    std::vector<float> scaled = grad;
    if (gradScale != 1.0f)
      for (float &g : scaled)
        g *= gradScale;
    cpu::adamw(param.data(), scaled.data(), expAvg.data(), expAvgSq.data(), n,
               lr, beta1, beta2, eps, weightDecay, step);
    // The same fp32 operations in the same order: bitwise on x86-64 (no
    // FMA contraction on the CPU); an ulp or two where the CPU build fuses.
    expectClose(dParam.read(), param, 1e-6f, 1e-7f, "param");
    expectClose(dExpAvg.read(), expAvg, 1e-6f, 1e-7f, "expAvg");
    expectClose(dExpAvgSq.read(), expAvgSq, 1e-6f, 1e-9f, "expAvgSq");
    // The gradient buffer is only read: hooks may still want it.
    expectClose(dGrad.read(), grad, 0.0f, 0.0f, "grad");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AdamwKernelTest,
                         ::testing::Values(AdamwCase{0.0f, 1.0f},
                                           AdamwCase{0.1f, 1.0f},
                                           AdamwCase{0.0f, 0.37f},
                                           AdamwCase{0.1f, 0.37f}));

// Step 5 straight from a non-trivial state (not reached through steps 0 to
// 4): the bias corrections of a later step on their own.
TEST(OptimizerKernelTest, AdamwAtALaterStep) {
  const int64_t n = 4099;
  std::vector<float> param = randomValues(n, 61), grad = randomValues(n, 62);
  std::vector<float> expAvg = randomValues(n, 63, 0.1f);
  std::vector<float> expAvgSq = randomValues(n, 64, 0.1f);
  for (float &v : expAvgSq)
    v = v * v; // a second moment is non-negative
  DeviceArray<float> dParam(param), dGrad(grad), dExpAvg(expAvg),
      dExpAvgSq(expAvgSq), dScale(std::vector<float>{1.0f});
  ASSERT_TRUE(adamw(dParam.get(), dGrad.get(), dScale.get(), dExpAvg.get(),
                    dExpAvgSq.get(), n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 5,
                    nullptr)
                  .ok());
  cpu::adamw(param.data(), grad.data(), expAvg.data(), expAvgSq.data(), n,
             3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 5);
  expectClose(dParam.read(), param, 1e-6f, 1e-7f, "param");
  expectClose(dExpAvg.read(), expAvg, 1e-6f, 1e-7f, "expAvg");
  expectClose(dExpAvgSq.read(), expAvgSq, 1e-6f, 1e-9f, "expAvgSq");
}

// One launch over several tensors (sizes around the chunk's, one empty, a
// BF16 working copy on some) gives each the bits of a call per tensor.
TEST(AdamwManyKernelTest, EveryTensorGetsTheBitsOfItsOwnCall) {
  const std::vector<int64_t> sizes = {1, 4095, 4096, 4097, 0, 100003, 77};
  const float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  DeviceArray<float> scale(std::vector<float>{0.75f});
  struct Arrays {
    std::unique_ptr<DeviceArray<float>> param, grad, m, v;
    std::unique_ptr<DeviceArray<uint16_t>> working;
  };
  std::vector<Arrays> batched(sizes.size()), alone(sizes.size());
  std::vector<AdamwTensor> tensors;
  for (size_t k = 0; k < sizes.size(); ++k) {
    int64_t n = sizes[k];
    std::vector<float> p = randomValues(n, 100 + k),
                       g = randomValues(n, 200 + k);
    std::vector<float> m = randomValues(n, 300 + k, 0.01f);
    std::vector<float> v(n, 0.5f);
    for (Arrays *a : {&batched[k], &alone[k]}) {
      a->param = std::make_unique<DeviceArray<float>>(p);
      a->grad = std::make_unique<DeviceArray<float>>(g);
      a->m = std::make_unique<DeviceArray<float>>(m);
      a->v = std::make_unique<DeviceArray<float>>(v);
      if (k % 2 == 0)
        a->working = std::make_unique<DeviceArray<uint16_t>>(n);
    }
    float decay = k % 3 == 0 ? 0.0f : 0.1f;
    tensors.push_back({batched[k].param->get(), batched[k].grad->get(),
                       batched[k].m->get(), batched[k].v->get(),
                       k % 2 == 0 ? batched[k].working->get() : nullptr, n,
                       decay});
    ASSERT_TRUE(adamw(alone[k].param->get(), alone[k].grad->get(), scale.get(),
                      alone[k].m->get(), alone[k].v->get(), n, lr, beta1, beta2,
                      eps, decay, 4, nullptr,
                      k % 2 == 0 ? alone[k].working->get() : nullptr)
                    .ok());
  }
  ASSERT_TRUE(adamwMany(tensors.data(), static_cast<int64_t>(tensors.size()),
                        scale.get(), lr, beta1, beta2, eps, 4, nullptr)
                  .ok());
  for (size_t k = 0; k < sizes.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(batched[k].param->read(), alone[k].param->read());
    EXPECT_EQ(batched[k].m->read(), alone[k].m->read());
    EXPECT_EQ(batched[k].v->read(), alone[k].v->read());
    if (k % 2 == 0) {
      EXPECT_EQ(batched[k].working->read(), alone[k].working->read());
    }
  }
}

} // namespace
} // namespace moe::rt::cuda
