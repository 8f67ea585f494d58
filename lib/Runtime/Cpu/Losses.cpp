//===- Losses.cpp - Cross-entropy and the load-balancing loss -------------===//

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/StepSemantics.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::rt::cpu {

namespace {
using detail::logSumExp;

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

CrossEntropySums crossEntropySums(const float *logits, const int32_t *targets,
                                  int64_t T, int64_t V) {
  // Each row's term in parallel, then their sum in row order.
  std::vector<double> terms(T, 0.0);
  detail::forEachShare(T, detail::rowGrain(V), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      if (detail::isCounted(targets[t], V)) {
        const float *x = logits + t * V;
        terms[t] = logSumExp(x, V) - static_cast<double>(x[targets[t]]);
      }
  });
  CrossEntropySums sums;
  for (int64_t t = 0; t < T; ++t) {
    if (!detail::isCounted(targets[t], V))
      continue;
    sums.sum += terms[t];
    ++sums.count;
  }
  return sums;
}

float crossEntropyMean(const CrossEntropySums &sums) {
  return semantics::crossEntropyMean(sums.sum, sums.count);
}

float crossEntropyForward(const float *logits, const int32_t *targets,
                          int64_t T, int64_t V) {
  return crossEntropyMean(crossEntropySums(logits, targets, T, V));
}

int64_t crossEntropyCount(const int32_t *targets, int64_t T, int64_t V) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t)
    n += detail::isCounted(targets[t], V);
  return n;
}

void crossEntropyBackward(float dloss, const float *logits,
                          const int32_t *targets, float *dlogits, int64_t T,
                          int64_t V) {
  crossEntropyBackward(dloss, logits, targets, dlogits, T, V,
                       crossEntropyCount(targets, T, V));
}

void crossEntropyBackward(float dloss, const float *logits,
                          const int32_t *targets, float *dlogits, int64_t T,
                          int64_t V, int64_t count) {
  double coef = count == 0
                    ? 0.0
                    : static_cast<double>(dloss) / static_cast<double>(count);
  detail::forEachShare(T, detail::rowGrain(V), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float *g = dlogits + t * V;
      if (!detail::isCounted(targets[t], V)) {
        std::fill(g, g + V, 0.0f);
        continue;
      }
      const float *x = logits + t * V;
      detail::scaledSoftmax(x, g, V, logSumExp(x, V), coef);
      g[targets[t]] -= static_cast<float>(coef);
    }
  });
}

AuxLossStatistics auxLossStatistics(const float *probs, int64_t T, int64_t E,
                                    int64_t topK) {
  AuxLossStatistics stats;
  stats.tokens = std::max<int64_t>(T, 0);
  stats.count = selectionCounts(probs, stats.tokens, E, topK);
  // Summed over t in order, as the single-rank loss always has.
  stats.probSum.assign(E, 0.0);
  for (int64_t t = 0; t < stats.tokens; ++t)
    for (int64_t e = 0; e < E; ++e)
      stats.probSum[e] += probs[t * E + e];
  return stats;
}

float auxLossFromStatistics(const AuxLossStatistics &stats) {
  return semantics::auxLossFromStatistics(
      stats.count.data(), stats.probSum.data(),
      static_cast<int64_t>(stats.count.size()), stats.tokens);
}

float auxLossForward(const float *probs, int64_t T, int64_t E, int64_t topK) {
  if (T <= 0)
    return 0.0f;
  return auxLossFromStatistics(auxLossStatistics(probs, T, E, topK));
}

void auxLossBackward(float dloss, const AuxLossStatistics &stats, float *dprobs,
                     int64_t T) {
  if (stats.tokens <= 0)
    return;
  // count is a step function of probs: only P carries gradient, and
  // d aux / d p[t, e] = E * count[e] / T^2 is the same for every token.
  int64_t E = static_cast<int64_t>(stats.count.size());
  std::vector<float> row(E);
  double t2 =
      static_cast<double>(stats.tokens) * static_cast<double>(stats.tokens);
  for (int64_t e = 0; e < E; ++e)
    row[e] =
        static_cast<float>(static_cast<double>(dloss) * static_cast<double>(E) *
                           static_cast<double>(stats.count[e]) / t2);
  for (int64_t t = 0; t < T; ++t)
    std::copy(row.begin(), row.end(), dprobs + t * E);
}

void auxLossBackward(float dloss, const float *probs, float *dprobs, int64_t T,
                     int64_t E, int64_t topK) {
  if (T <= 0)
    return;
  AuxLossStatistics stats;
  stats.tokens = T;
  stats.count = selectionCounts(probs, T, E, topK);
  auxLossBackward(dloss, stats, dprobs, T);
}

} // namespace moe::rt::cpu
