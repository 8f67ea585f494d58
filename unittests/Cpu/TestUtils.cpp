//===- TestUtils.cpp - Shared helpers of the CPU kernel tests -------------===//

#include "TestUtils.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

namespace moe::rt::cpu::test {

std::vector<float> randomVector(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

double dotDouble(const float *a, const float *b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

GradCheckResult checkGradient(std::vector<float> &x,
                              const std::vector<float> &analytic,
                              const std::function<double()> &loss,
                              const GradCheckOptions &options) {
  GradCheckResult result;
  std::vector<int64_t> indices(x.size());
  std::iota(indices.begin(), indices.end(), 0);
  if (options.maxSamples > 0 &&
      options.maxSamples < static_cast<int64_t>(x.size())) {
    std::mt19937 gen(options.sampleSeed);
    std::shuffle(indices.begin(), indices.end(), gen);
    indices.resize(options.maxSamples);
    std::sort(indices.begin(), indices.end());
  }
  for (int64_t i : indices) {
    float saved = x[i];
    x[i] = saved + options.step;
    double plus = loss();
    x[i] = saved - options.step;
    double minus = loss();
    x[i] = saved;
    // The actual distance between the perturbed fp32 values, not 2h.
    double width = static_cast<double>(saved + options.step) -
                   static_cast<double>(saved - options.step);
    double numeric = (plus - minus) / width;
    double exact = analytic[i];
    double tol = options.absTol +
                 options.relTol * std::max(std::fabs(numeric), std::fabs(exact));
    ++result.checked;
    if (!(std::fabs(numeric - exact) <= tol)) {
      if (result.failures == 0) {
        std::ostringstream os;
        os << "element " << i << ": analytic " << exact << ", numeric "
           << numeric << " (tolerance " << tol << ")";
        result.firstFailure = os.str();
      }
      ++result.failures;
    }
  }
  return result;
}

} // namespace moe::rt::cpu::test
