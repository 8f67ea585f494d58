//===- ExpertLoad.cpp - per-expert token counts and bias balancing --------===//
//
// A router's load is the number of assignments it admitted to each expert
// over the step's tokens (every microbatch, every data rank). DeepSeek-V3
// balances on it without an auxiliary loss: an overloaded expert's
// selection bias goes down by a fixed rate, an underloaded one's up.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include <algorithm>
#include <cmath>

namespace moe::rt::cpu {

std::vector<int64_t> expertCounts(const int32_t *ids, int64_t n, int64_t E) {
  std::vector<int64_t> counts(E, 0);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < E)
      ++counts[ids[i]];
  return counts;
}

void addExpertCounts(const std::vector<int64_t> &counts, float *load) {
  for (size_t e = 0; e < counts.size(); ++e)
    load[e] += static_cast<float>(counts[e]);
}

void expertLoadUpdate(float *load, float *bias, int64_t E, float rate) {
  if (bias && E > 0) {
    double total = 0.0;
    for (int64_t e = 0; e < E; ++e)
      total += load[e];
    double mean = total / static_cast<double>(E);
    for (int64_t e = 0; e < E; ++e) {
      double error = mean - static_cast<double>(load[e]);
      float sign = error > 0.0 ? 1.0f : error < 0.0 ? -1.0f : 0.0f;
      bias[e] += rate * sign;
    }
  }
  std::fill(load, load + E, 0.0f);
}

ExpertLoadStats expertLoadStats(const float *load, int64_t E) {
  ExpertLoadStats stats;
  if (E <= 0)
    return stats;
  stats.min = *std::min_element(load, load + E);
  stats.max = *std::max_element(load, load + E);
  double sum = 0.0, squares = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    sum += load[e];
    squares += static_cast<double>(load[e]) * load[e];
  }
  double mean = sum / static_cast<double>(E);
  double variance =
      std::max(0.0, squares / static_cast<double>(E) - mean * mean);
  stats.cv = mean > 0.0 ? std::sqrt(variance) / mean : 0.0;
  return stats;
}

} // namespace moe::rt::cpu
