//===- RouterKernelTest.cpp - CUDA router kernels vs the CPU --------------===//
//
// The selected experts must be the CPU's exactly, drops included; the
// probabilities and weights agree to rounding (expf and the order of the
// softmax's double sum differ). Logits on a coarse grid make exact ties
// common (equal logits give bitwise equal probabilities on either side) and
// keep distinct probabilities far apart relative to that rounding, so the
// indices' comparison cannot hinge on an ulp.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <limits>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

/// Logits that are multiples of 1/4 in [-2, 2]: many ties within a row.
std::vector<float> gridLogits(int64_t n, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> step(-8, 8);
  std::vector<float> logits(n);
  for (float &l : logits)
    l = step(generator) / 4.0f;
  return logits;
}

struct RouterOutputs {
  std::vector<float> probs, weights;
  std::vector<int32_t> indices;
};

RouterOutputs cpuRoute(const std::vector<float> &logits, int64_t T, int64_t E,
                       int64_t topK, float capacityFactor) {
  RouterOutputs out{std::vector<float>(T * E), std::vector<float>(T * topK),
                    std::vector<int32_t>(T * topK)};
  cpu::routerForward(logits.data(), out.probs.data(), out.weights.data(),
                     out.indices.data(), T, E, topK, capacityFactor);
  return out;
}

RouterOutputs gpuRoute(const std::vector<float> &logits, int64_t T, int64_t E,
                       int64_t topK, float capacityFactor) {
  DeviceArray<float> dLogits(logits), probs(T * E), weights(T * topK);
  DeviceArray<int32_t> indices(T * topK);
  absl::Status status =
      routerForward(dLogits.get(), probs.get(), weights.get(), indices.get(), T,
                    E, topK, capacityFactor, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  return {probs.read(), weights.read(), indices.read()};
}

int64_t countDropped(const std::vector<int32_t> &indices) {
  return std::count(indices.begin(), indices.end(), -1);
}

struct RouterShape {
  int64_t T, E, topK;
  float capacityFactor;
};

void PrintTo(const RouterShape &shape, std::ostream *os) {
  *os << "T=" << shape.T << " E=" << shape.E << " topK=" << shape.topK
      << " capacityFactor=" << shape.capacityFactor;
}

class RouterKernelTest : public ::testing::TestWithParam<RouterShape> {};

TEST_P(RouterKernelTest, ForwardMatchesTheCpu) {
  const auto [T, E, topK, capacityFactor] = GetParam();
  for (bool ties : {true, false}) {
    SCOPED_TRACE(ties ? "grid logits" : "normal logits");
    std::vector<float> logits =
        ties ? gridLogits(T * E, 21) : randomValues(T * E, 22, 2.0f);
    RouterOutputs expected = cpuRoute(logits, T, E, topK, capacityFactor);
    RouterOutputs actual = gpuRoute(logits, T, E, topK, capacityFactor);
    // Make sure the drops are exercised where the capacity is tight.
    if (capacityFactor > 0.0f && capacityFactor < 1.0f) {
      EXPECT_GT(countDropped(expected.indices), 0);
    }
    EXPECT_EQ(actual.indices, expected.indices);
    expectClose(actual.probs, expected.probs, 2e-6f, 1e-30f, "probs");
    // Dropped slots keep their weight, on both sides.
    expectClose(actual.weights, expected.weights, 4e-6f, 1e-30f, "weights");
  }
}

TEST_P(RouterKernelTest, BackwardMatchesTheCpu) {
  const auto [T, E, topK, capacityFactor] = GetParam();
  // The backward recomputes the selection from probs: feed both the same.
  RouterOutputs routed =
      cpuRoute(gridLogits(T * E, 31), T, E, topK, capacityFactor);
  std::vector<float> dweights = randomValues(T * topK, 32);
  std::vector<float> dprobs = randomValues(T * E, 33, 0.5f);
  DeviceArray<float> dDweights(dweights), dDprobs(dprobs), probs(routed.probs),
      dlogits(T * E);
  std::vector<float> expected(T * E);

  cpu::routerBackward(dweights.data(), nullptr, routed.probs.data(),
                      expected.data(), T, E, topK);
  ASSERT_TRUE(routerBackward(dDweights.get(), nullptr, probs.get(),
                             dlogits.get(), T, E, topK, nullptr)
                  .ok());
  expectClose(dlogits.read(), expected, 1e-4f, 1e-6f, "dlogits");

  cpu::routerBackward(dweights.data(), dprobs.data(), routed.probs.data(),
                      expected.data(), T, E, topK);
  ASSERT_TRUE(routerBackward(dDweights.get(), dDprobs.get(), probs.get(),
                             dlogits.get(), T, E, topK, nullptr)
                  .ok());
  expectClose(dlogits.read(), expected, 1e-4f, 1e-6f, "dlogits with dprobs");

  // In place over dprobs, as the kernel reads a row's dprobs before writing.
  ASSERT_TRUE(routerBackward(dDweights.get(), dDprobs.get(), probs.get(),
                             dDprobs.get(), T, E, topK, nullptr)
                  .ok());
  expectClose(dDprobs.read(), expected, 1e-4f, 1e-6f, "dlogits over dprobs");
}

// T not a multiple of a block's 8 tokens (37, 1000); E below, at and above
// a warp's width, one not a multiple of it, and the most a warp covers;
// capacity factors that drop (0.5), nearly never drop (1.25) and none.
INSTANTIATE_TEST_SUITE_P(Shapes, RouterKernelTest,
                         ::testing::Values(RouterShape{37, 4, 1, 0.0f},
                                           RouterShape{37, 8, 2, 0.5f},
                                           RouterShape{1000, 4, 2, 0.5f},
                                           RouterShape{1000, 8, 1, 0.5f},
                                           RouterShape{1000, 8, 2, 1.25f},
                                           RouterShape{1000, 64, 2, 0.5f},
                                           RouterShape{1000, 64, 1, 0.0f},
                                           RouterShape{300, 100, 2, 0.5f},
                                           RouterShape{37, 1024, 8, 0.5f},
                                           RouterShape{5, 40, 40, 0.0f}));

TEST(RouterKernelTest, TiesGoToTheLowerId) {
  const int64_t T = 3, E = 8, topK = 3;
  std::vector<float> logits = {0, 0, 0, 0, 0, 0, 0, 0,  // all equal: 0, 1, 2
                               1, 2, 0, 2, 1, 2, 0, 0,  // 2 at 1, 3, 5
                               0, 1, 0, 0, 3, 0, 1, 0}; // 4, then 1 before 6
  RouterOutputs actual = gpuRoute(logits, T, E, topK, 0.0f);
  EXPECT_EQ(actual.indices, (std::vector<int32_t>{0, 1, 2, 1, 3, 5, 4, 1, 6}));
  EXPECT_EQ(actual.indices, cpuRoute(logits, T, E, topK, 0.0f).indices);
}

// A NaN or +inf logit, or a row of -inf, makes every probability NaN; the
// CPU's scan then keeps its first candidate each time: ids 0, 1, ...
TEST(RouterKernelTest, NonFiniteRowsSelectLikeTheCpu) {
  const int64_t E = 6, topK = 2;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = {
      0,    1,    nan,  3,    2,    1,    //
      nan,  1,    2,    3,    4,    5,    //
      0,    inf,  1,    2,    3,    4,    //
      -inf, -inf, -inf, -inf, -inf, -inf, //
      1,    -inf, 2,    -inf, 2,    0};   // finite: 2, then 4
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  RouterOutputs expected = cpuRoute(logits, T, E, topK, 0.0f);
  RouterOutputs actual = gpuRoute(logits, T, E, topK, 0.0f);
  EXPECT_EQ(actual.indices, expected.indices);
  for (int64_t i = 0; i < (T - 1) * E; ++i)
    EXPECT_TRUE(std::isnan(actual.probs[i])) << i;
  std::vector<float> lastRow(actual.probs.end() - E, actual.probs.end());
  expectClose(
      lastRow,
      std::vector<float>(expected.probs.end() - E, expected.probs.end()), 2e-6f,
      0.0f, "finite row");
}

TEST(RouterKernelTest, RejectsWhatALaunchCannotTake) {
  // Nothing is launched: null pointers are never touched.
  auto forward = [](int64_t T, int64_t E, int64_t topK) {
    return routerForward(nullptr, nullptr, nullptr, nullptr, T, E, topK, 0.0f,
                         nullptr);
  };
  auto backward = [](int64_t T, int64_t E, int64_t topK) {
    return routerBackward(nullptr, nullptr, nullptr, nullptr, T, E, topK,
                          nullptr);
  };
  for (auto kernel : {+forward, +backward}) {
    EXPECT_TRUE(absl::IsInvalidArgument(kernel(8, 2048, 2)));
    EXPECT_TRUE(absl::IsInvalidArgument(kernel(8, 0, 1)));
    EXPECT_TRUE(absl::IsInvalidArgument(kernel(8, 8, 0)));
    EXPECT_TRUE(absl::IsInvalidArgument(kernel(8, 8, 9)));
    EXPECT_TRUE(absl::IsInvalidArgument(kernel(-1, 8, 2)));
    EXPECT_TRUE(kernel(0, 8, 2).ok()); // no tokens, nothing to do
  }
}

} // namespace
} // namespace moe::rt::cuda
