//===- TestUtils.h - Shared helpers of the CPU kernel tests -----*- C++ -*-===//
//
// Seeded random tensors, double-precision scalar losses and a central
// finite-difference gradient checker.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_CPU_TESTUTILS_H
#define MOE_UNITTESTS_CPU_TESTUTILS_H

#include "moe/Runtime/Cpu/Kernels.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace moe::rt::cpu::test {

/// n uniform values in [lo, hi) from a fixed seed.
std::vector<float> randomVector(int64_t n, uint32_t seed, float lo = -1.0f,
                                float hi = 1.0f);

/// sum_i a[i] * b[i], accumulated in double.
double dotDouble(const float *a, const float *b, int64_t n);

/// Sets the kernels' thread count for one test and restores it after.
class ThreadCount {
public:
  explicit ThreadCount(int threads) : before(numThreads()) {
    setNumThreads(threads);
  }
  ~ThreadCount() { setNumThreads(before); }

private:
  int before;
};

/// Bitwise equality of two float buffers (NaN-safe, -0 != +0).
inline bool bitwiseEqual(const std::vector<float> &a,
                         const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct GradCheckOptions {
  /// Central-difference step.
  float step = 1e-2f;
  /// |numeric - analytic| <= absTol + relTol * max(|numeric|, |analytic|).
  double relTol = 1e-2;
  double absTol = 1e-3;
  /// Check only this many randomly chosen elements (0: all of them).
  int64_t maxSamples = 0;
  uint32_t sampleSeed = 1234;
};

struct GradCheckResult {
  int64_t checked = 0;
  int64_t failures = 0;
  /// Description of the first mismatch, empty when none.
  std::string firstFailure;
};

/// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h, where
/// loss reads x (perturbed in place and restored).
GradCheckResult checkGradient(std::vector<float> &x,
                              const std::vector<float> &analytic,
                              const std::function<double()> &loss,
                              const GradCheckOptions &options = {});

} // namespace moe::rt::cpu::test

/// Asserts that checkGradient finds no mismatch, naming the tensor.
#define EXPECT_GRADIENT(name, x, analytic, loss, options)                      \
  do {                                                                         \
    auto moeGradResult = ::moe::rt::cpu::test::checkGradient(                  \
        x, analytic, loss, options);                                           \
    EXPECT_GT(moeGradResult.checked, 0) << name;                               \
    EXPECT_EQ(moeGradResult.failures, 0)                                       \
        << name << ": " << moeGradResult.firstFailure;                         \
  } while (false)

#endif // MOE_UNITTESTS_CPU_TESTUTILS_H
