//===- LayerKernelTest.cpp - CUDA embedding, RMSNorm and RoPE vs the CPU --===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

TEST(LayerKernelTest, EmbeddingAndItsGradient) {
  const int64_t T = 301, V = 50, H = 67;
  std::vector<int32_t> tokens(T);
  for (int64_t t = 0; t < T; ++t)
    tokens[t] = static_cast<int32_t>((t * 7 + t / 5) % V); // repeated ids
  std::vector<float> table = randomValues(V * H, 1), dy = randomValues(T * H, 2);
  DeviceArray<int32_t> dTokens(tokens);
  DeviceArray<float> dTable(table), y(T * H), dDy(dy), dtable(V * H);
  DeviceArray<int64_t> firstBad(1);
  ASSERT_TRUE(embeddingForward(dTokens.get(), dTable.get(), y.get(), T, V, H,
                               firstBad.get(), nullptr)
                  .ok());
  std::vector<float> expected(T * H);
  EXPECT_EQ(cpu::embeddingForward(tokens.data(), table.data(), expected.data(),
                                  T, V, H),
            -1);
  EXPECT_EQ(firstBad.read()[0], -1);
  expectClose(y.read(), expected, 0.0f, 0.0f, "y");

  // Same order of sums as the CPU: bitwise.
  ASSERT_TRUE(embeddingBackward(dDy.get(), dTokens.get(), dtable.get(), T, V,
                                H, nullptr)
                  .ok());
  std::vector<float> expectedTable(V * H);
  cpu::embeddingBackward(dy.data(), tokens.data(), expectedTable.data(), T, V,
                         H);
  expectClose(dtable.read(), expectedTable, 0.0f, 0.0f, "dtable");

  // Ids outside the table: the first is reported, their rows are skipped.
  tokens[40] = V;
  tokens[9] = -3;
  DeviceArray<int32_t> badTokens(tokens);
  ASSERT_TRUE(embeddingForward(badTokens.get(), dTable.get(), y.get(), T, V, H,
                               firstBad.get(), nullptr)
                  .ok());
  EXPECT_EQ(firstBad.read()[0], 9);
  ASSERT_TRUE(embeddingBackward(dDy.get(), badTokens.get(), dtable.get(), T, V,
                                H, nullptr)
                  .ok());
  cpu::embeddingBackward(dy.data(), tokens.data(), expectedTable.data(), T, V,
                         H);
  expectClose(dtable.read(), expectedTable, 0.0f, 0.0f, "dtable with bad ids");
}

TEST(LayerKernelTest, RmsNormAndItsGradient) {
  for (int64_t H : {64, 1000, 4099}) {
    SCOPED_TRACE(H);
    const int64_t T = 37;
    const float eps = 1e-5f;
    std::vector<float> x = randomValues(T * H, 3), w = randomValues(H, 4);
    std::vector<float> dy = randomValues(T * H, 5);
    DeviceArray<float> deviceX(x), deviceW(w), y(T * H), ddy(dy), dx(T * H), dw(H);
    ASSERT_TRUE(rmsNormForward(deviceX.get(), deviceW.get(), y.get(), T, H, eps, nullptr)
                    .ok());
    std::vector<float> expected(T * H);
    cpu::rmsNormForward(x.data(), w.data(), expected.data(), T, H, eps);
    expectClose(y.read(), expected, 1e-6f, 1e-7f, "y");

    ASSERT_TRUE(rmsNormBackward(ddy.get(), deviceX.get(), deviceW.get(), dx.get(),
                                dw.get(), T, H, eps, nullptr)
                    .ok());
    std::vector<float> expectedDx(T * H), expectedDw(H);
    cpu::rmsNormBackward(dy.data(), x.data(), w.data(), expectedDx.data(),
                         expectedDw.data(), T, H, eps);
    expectClose(dx.read(), expectedDx, 1e-5f, 1e-6f, "dx");
    expectClose(dw.read(), expectedDw, 1e-5f, 1e-6f, "dw");
  }
}

TEST(LayerKernelTest, RopeAndItsTranspose) {
  const int64_t B = 2, S = 77, heads = 3;
  for (int64_t headDim : {16, 64, 7}) {
    SCOPED_TRACE(headDim);
    const int64_t n = B * S * heads * headDim;
    std::vector<float> x = randomValues(n, 6);
    DeviceArray<float> dx(x), y(n), back(n);
    ASSERT_TRUE(ropeForward(dx.get(), y.get(), B, S, heads, headDim, 1e4f,
                            nullptr)
                    .ok());
    std::vector<float> expected(n), expectedBack(n);
    cpu::ropeForward(x.data(), expected.data(), B, S, heads, headDim, 1e4f);
    expectClose(y.read(), expected, 1e-6f, 1e-6f, "y");
    ASSERT_TRUE(ropeBackward(dx.get(), back.get(), B, S, heads, headDim, 1e4f,
                             nullptr)
                    .ok());
    cpu::ropeBackward(x.data(), expectedBack.data(), B, S, heads, headDim,
                      1e4f);
    expectClose(back.read(), expectedBack, 1e-6f, 1e-6f, "dx");
    // In place, as the executor may run it.
    ASSERT_TRUE(ropeForward(dx.get(), dx.get(), B, S, heads, headDim, 1e4f,
                            nullptr)
                    .ok());
    expectClose(dx.read(), expected, 1e-6f, 1e-6f, "y in place");
  }
}

} // namespace
} // namespace moe::rt::cuda
