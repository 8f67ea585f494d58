//===- Losses.cpp - Cross-entropy and the load-balancing loss -------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::rt::cpu {

namespace {
/// Targets outside [0, V) are ignored: negative ones by definition (HF's
/// -100), ids >= V because there is no logit to read for them.
bool isCounted(int32_t target, int64_t V) { return target >= 0 && target < V; }

/// log sum_v exp(x[v]), max-subtracted; the sum is accumulated in double.
double logSumExp(const float *x, int64_t V) {
  float m = *std::max_element(x, x + V);
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v)
    sum += std::exp(static_cast<double>(x[v]) - m);
  return static_cast<double>(m) + std::log(sum);
}

int64_t countTargets(const int32_t *targets, int64_t T, int64_t V) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t)
    n += isCounted(targets[t], V);
  return n;
}

/// count[e] = number of (t, j) top-k selections of expert e, recomputed from
/// probs with the router's rule (so before any capacity drop).
std::vector<int64_t> selectionCounts(const float *probs, int64_t T, int64_t E,
                                     int64_t topK) {
  std::vector<int64_t> count(E, 0);
  std::vector<int32_t> idx(topK);
  for (int64_t t = 0; t < T; ++t) {
    detail::selectTopK(probs + t * E, E, topK, idx.data());
    for (int32_t e : idx)
      ++count[e];
  }
  return count;
}
} // namespace

float crossEntropyForward(const float *logits, const int32_t *targets,
                          int64_t T, int64_t V) {
  double total = 0.0;
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!isCounted(targets[t], V))
      continue;
    const float *x = logits + t * V;
    total += logSumExp(x, V) - static_cast<double>(x[targets[t]]);
    ++n;
  }
  return n == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(n));
}

void crossEntropyBackward(float dloss, const float *logits,
                          const int32_t *targets, float *dlogits, int64_t T,
                          int64_t V) {
  int64_t n = countTargets(targets, T, V);
  double coef = n == 0 ? 0.0 : static_cast<double>(dloss) / static_cast<double>(n);
  for (int64_t t = 0; t < T; ++t) {
    float *g = dlogits + t * V;
    if (!isCounted(targets[t], V)) {
      std::fill(g, g + V, 0.0f);
      continue;
    }
    const float *x = logits + t * V;
    double lse = logSumExp(x, V);
    for (int64_t v = 0; v < V; ++v)
      g[v] = static_cast<float>(coef * std::exp(static_cast<double>(x[v]) - lse));
    g[targets[t]] -= static_cast<float>(coef);
  }
}

float auxLossForward(const float *probs, int64_t T, int64_t E, int64_t topK) {
  if (T <= 0)
    return 0.0f;
  std::vector<int64_t> count = selectionCounts(probs, T, E, topK);
  // P[e] = (1/T) sum_t p[t, e], summed over t in order.
  std::vector<double> P(E, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e)
      P[e] += probs[t * E + e];
  double tokens = static_cast<double>(T);
  double loss = 0.0;
  for (int64_t e = 0; e < E; ++e)
    loss += static_cast<double>(count[e]) / tokens * (P[e] / tokens);
  return static_cast<float>(static_cast<double>(E) * loss);
}

void auxLossBackward(float dloss, const float *probs, float *dprobs, int64_t T,
                     int64_t E, int64_t topK) {
  if (T <= 0)
    return;
  // count is a step function of probs: only P carries gradient, and
  // d aux / d p[t, e] = E * count[e] / T^2 is the same for every token.
  std::vector<int64_t> count = selectionCounts(probs, T, E, topK);
  std::vector<float> row(E);
  double t2 = static_cast<double>(T) * static_cast<double>(T);
  for (int64_t e = 0; e < E; ++e)
    row[e] = static_cast<float>(static_cast<double>(dloss) *
                                static_cast<double>(E) *
                                static_cast<double>(count[e]) / t2);
  for (int64_t t = 0; t < T; ++t)
    std::copy(row.begin(), row.end(), dprobs + t * E);
}

} // namespace moe::rt::cpu
