//===- LinearTest.cpp - Tests of the sgemm-backed linear kernels ----------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

// Naive y = x W^T in double.
std::vector<float> naiveLinear(const std::vector<float> &x,
                               const std::vector<float> &w, int64_t T,
                               int64_t K, int64_t N) {
  std::vector<float> y(T * N);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(x[t * K + k]) * w[n * K + k];
      y[t * N + n] = static_cast<float>(s);
    }
  return y;
}

TEST(LinearTest, ForwardMatchesNaive) {
  const int64_t T = 7, K = 13, N = 5;
  auto x = randomVector(T * K, 1), w = randomVector(N * K, 2);
  std::vector<float> y(T * N);
  linearForward(x.data(), w.data(), y.data(), T, K, N);
  auto ref = naiveLinear(x, w, T, K, N);
  for (int64_t i = 0; i < T * N; ++i)
    EXPECT_NEAR(y[i], ref[i], 1e-5) << i;
}

TEST(LinearTest, BackwardMatchesFiniteDifferences) {
  const int64_t T = 4, K = 6, N = 3;
  auto x = randomVector(T * K, 3), w = randomVector(N * K, 4);
  auto dy = randomVector(T * N, 5);
  std::vector<float> dx(T * K), dw(N * K), y(T * N);
  linearBackwardInput(dy.data(), w.data(), dx.data(), T, K, N);
  linearBackwardWeight(dy.data(), x.data(), dw.data(), T, K, N);
  auto loss = [&] {
    linearForward(x.data(), w.data(), y.data(), T, K, N);
    return dotDouble(dy.data(), y.data(), T * N);
  };
  GradCheckOptions options;
  EXPECT_GRADIENT("dx", x, dx, loss, options);
  EXPECT_GRADIENT("dw", w, dw, loss, options);
}

TEST(LinearTest, EmptyReductionGivesZeros) {
  // T = 0 tokens: the weight gradient is an empty sum and must be written as
  // zeros, not left as whatever the buffer held.
  const int64_t K = 3, N = 2;
  std::vector<float> dw(N * K, 7.0f);
  linearBackwardWeight(nullptr, nullptr, dw.data(), /*T=*/0, K, N);
  for (float v : dw)
    EXPECT_EQ(v, 0.0f);
}

TEST(LinearTest, Deterministic) {
  const int64_t T = 64, K = 96, N = 80;
  auto x = randomVector(T * K, 6), w = randomVector(N * K, 7);
  std::vector<float> a(T * N), b(T * N);
  linearForward(x.data(), w.data(), a.data(), T, K, N);
  linearForward(x.data(), w.data(), b.data(), T, K, N);
  EXPECT_TRUE(bitwiseEqual(a, b));
}

TEST(LinearTest, RoughSpeed) {
  // Not a benchmark: prints a throughput figure for the report and guards
  // against a pathological slowdown (e.g. a naive loop sneaking in).
  const int64_t T = 512, K = 1024, N = 1024;
  auto x = randomVector(T * K, 8), w = randomVector(N * K, 9);
  std::vector<float> y(T * N);
  linearForward(x.data(), w.data(), y.data(), T, K, N); // warm up
  auto start = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int r = 0; r < reps; ++r)
    linearForward(x.data(), w.data(), y.data(), T, K, N);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count() /
                   reps;
  double gflops = 2.0 * T * K * N / seconds / 1e9;
  std::printf("linearForward [%ld x %ld] x [%ld x %ld]^T: %.2f ms, %.1f "
              "GFLOP/s\n",
              static_cast<long>(T), static_cast<long>(K), static_cast<long>(N),
              static_cast<long>(K), seconds * 1e3, gflops);
  EXPECT_GT(gflops, 1.0);
}

} // namespace
