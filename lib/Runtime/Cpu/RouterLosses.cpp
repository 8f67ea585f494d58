//===- RouterLosses.cpp - Sequence-wise balance loss and router z-loss ----===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include <algorithm>
#include <vector>

namespace moe::rt::cpu {

namespace {
/// HF's guard on a sigmoid score sum, kept for any scores.
constexpr double kScoreSumEpsilon = 1e-20;

/// The sum of a token's scores, with the guard.
double scoreTotal(const float *p, int64_t E) {
  double total = 0.0;
  for (int64_t e = 0; e < E; ++e)
    total += p[e];
  return total + kScoreSumEpsilon;
}
} // namespace

SequenceAuxStatistics sequenceAuxStatistics(const float *probs,
                                            const int32_t *indices, int64_t B,
                                            int64_t S, int64_t E, int64_t K) {
  SequenceAuxStatistics stats;
  stats.experts = E;
  stats.slots = K;
  stats.tokensPerSequence = S;
  stats.count.assign(B * E, 0);
  stats.scoreSum.assign(B * E, 0.0);
  detail::forEachShare(B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      int64_t *count = stats.count.data() + b * E;
      double *scores = stats.scoreSum.data() + b * E;
      for (int64_t s = 0; s < S; ++s) {
        int64_t t = b * S + s;
        const float *p = probs + t * E;
        double total = scoreTotal(p, E);
        for (int64_t e = 0; e < E; ++e)
          scores[e] += p[e] / total;
        for (int64_t j = 0; j < K; ++j)
          if (int32_t e = indices[t * K + j]; e >= 0 && e < E)
            ++count[e];
      }
    }
  });
  return stats;
}

double sequenceAuxLossSum(const SequenceAuxStatistics &stats) {
  double S = static_cast<double>(stats.tokensPerSequence);
  if (S <= 0)
    return 0.0;
  int64_t E = stats.experts;
  double scale =
      static_cast<double>(E) / (static_cast<double>(stats.slots) * S * S);
  double sum = 0.0;
  for (size_t i = 0; i < stats.count.size(); ++i)
    sum += scale * static_cast<double>(stats.count[i]) * stats.scoreSum[i];
  return sum;
}

void sequenceAuxLossBackward(float dloss, int64_t sequences,
                             const SequenceAuxStatistics &stats,
                             const float *probs, float *dprobs,
                             int64_t localTokens) {
  int64_t E = stats.experts;
  int64_t B = E > 0 ? static_cast<int64_t>(stats.count.size()) / E : 0;
  int64_t sLocal = B > 0 ? localTokens / B : 0;
  double S = static_cast<double>(stats.tokensPerSequence);
  if (S <= 0 || sequences <= 0) {
    std::fill(dprobs, dprobs + localTokens * E, 0.0f);
    return;
  }
  double scale = static_cast<double>(dloss) / static_cast<double>(sequences) *
                 static_cast<double>(E) /
                 (static_cast<double>(stats.slots) * S * S);
  detail::forEachShare(B, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> g(E);
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t e = 0; e < E; ++e)
        g[e] = scale * static_cast<double>(stats.count[b * E + e]);
      for (int64_t s = 0; s < sLocal; ++s) {
        int64_t t = b * sLocal + s;
        const float *p = probs + t * E;
        double total = scoreTotal(p, E);
        // d q_j / d p_i = (delta_ij - q_j) / total, q = p / total.
        double weighted = 0.0;
        for (int64_t j = 0; j < E; ++j)
          weighted += g[j] * (p[j] / total);
        for (int64_t e = 0; e < E; ++e)
          dprobs[t * E + e] = static_cast<float>((g[e] - weighted) / total);
      }
    }
  });
}

ZLossSums zLossSums(const float *logits, int64_t T, int64_t E) {
  // Each row's term in parallel, then their sum in row order.
  std::vector<double> terms(T);
  detail::forEachShare(T, detail::rowGrain(E), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      double lse = detail::logSumExp(logits + t * E, E);
      terms[t] = lse * lse;
    }
  });
  ZLossSums sums;
  for (double term : terms)
    sums.sum += term;
  sums.count = T;
  return sums;
}

void zLossBackward(float dloss, const float *logits, float *dlogits, int64_t T,
                   int64_t E, int64_t count) {
  double coef = count == 0 ? 0.0
                           : 2.0 * static_cast<double>(dloss) /
                                 static_cast<double>(count);
  detail::forEachShare(T, detail::rowGrain(E), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *x = logits + t * E;
      double lse = detail::logSumExp(x, E);
      detail::scaledSoftmax(x, dlogits + t * E, E, lse, coef * lse);
    }
  });
}

} // namespace moe::rt::cpu
