//===- Router.cpp - Top-k routers (HF Mixtral, Qwen3-MoE, DeepSeek-V3) ----===//
//
// Forward: softmax or sigmoid scores, top-k with ties to the lower expert id
// (of the scores plus a selection bias, among the best groups' experts),
// weights renormalised or not and scaled, then optional capacity dropping
// admitted slot-major.
// Backward: the top-k is recomputed from the saved probabilities (the indices
// saved by the forward may be -1 where capacity dropped a slot, but the
// renormalised weight still depends on that expert's probability).
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace moe::rt::cpu {

void detail::selectTopK(const float *p, int64_t E, int64_t topK,
                        int32_t *idx) {
  for (int64_t j = 0; j < topK; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (std::find(idx, idx + j, static_cast<int32_t>(e)) != idx + j)
        continue;
      // Strictly greater: scanning ids upwards, a tie keeps the lower id.
      if (best < 0 || p[e] > p[best])
        best = e;
    }
    idx[j] = static_cast<int32_t>(best);
  }
}

int64_t detail::expertCapacity(float capacityFactor, int64_t T, int64_t E,
                               int64_t topK) {
  if (capacityFactor <= 0.0f || E <= 0)
    return -1;
  // Evaluated in double in the same order as test/reference's
  // ceil(cf * T * k / E), so the two agree whenever cf is exact in fp32
  // (0.5, 1.0, 1.25, ...).
  double c = static_cast<double>(capacityFactor) * static_cast<double>(T) *
             static_cast<double>(topK) / static_cast<double>(E);
  return static_cast<int64_t>(std::ceil(c));
}

void detail::selectRouted(const float *probs, int64_t E, int64_t topK,
                          const RoutingRule &rule, int32_t *idx,
                          RoutingScratch &scratch) {
  if (!rule.bias && rule.groups <= 1)
    return selectTopK(probs, E, topK, idx);
  float *choice = scratch.choice.data();
  for (int64_t e = 0; e < E; ++e)
    choice[e] = rule.bias ? probs[e] + rule.bias[e] : probs[e];
  if (rule.groups > 1) {
    // Each group scores the sum of its two best; the experts of all but
    // the best topGroups groups stop being candidates.
    int64_t size = E / rule.groups;
    for (int64_t g = 0; g < rule.groups; ++g) {
      int32_t top2[2];
      selectTopK(choice + g * size, size, 2, top2);
      scratch.groupScore[g] =
          choice[g * size + top2[0]] + choice[g * size + top2[1]];
    }
    int32_t *best = scratch.bestGroups.data();
    selectTopK(scratch.groupScore.data(), rule.groups, rule.topGroups, best);
    for (int64_t g = 0; g < rule.groups; ++g)
      if (std::find(best, best + rule.topGroups, static_cast<int32_t>(g)) ==
          best + rule.topGroups)
        std::fill(choice + g * size, choice + (g + 1) * size,
                  -std::numeric_limits<float>::infinity());
  }
  selectTopK(choice, E, topK, idx);
}

namespace {
/// The denominator of normalised routing weights: the selected scores'
/// sum, plus HF DeepSeek-V3's 1e-20 for sigmoid scores (which, unlike a
/// softmax's top choice, may all underflow to zero).
float selectedSum(const float *p, const int32_t *idx, int64_t topK,
                  const RoutingRule &rule) {
  float selected = 0.0f;
  for (int64_t j = 0; j < topK; ++j)
    selected += p[idx[j]];
  return rule.sigmoid ? selected + 1e-20f : selected;
}
} // namespace

void routerForward(const float *logits, float *probs, float *weights,
                   int32_t *indices, int64_t T, int64_t E, int64_t topK,
                   float capacityFactor, const RoutingRule &rule) {
  detail::RoutingScratch scratch(E, rule);
  for (int64_t t = 0; t < T; ++t) {
    const float *x = logits + t * E;
    float *p = probs + t * E;
    if (rule.sigmoid) {
      for (int64_t e = 0; e < E; ++e)
        p[e] = 1.0f / (1.0f + std::exp(-x[e]));
    } else {
      float m = *std::max_element(x, x + E);
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e) {
        p[e] = std::exp(x[e] - m);
        sum += p[e];
      }
      float denom = static_cast<float>(sum);
      for (int64_t e = 0; e < E; ++e)
        p[e] /= denom;
    }

    int32_t *idx = indices + t * topK;
    float *w = weights + t * topK;
    detail::selectRouted(p, E, topK, rule, idx, scratch);
    float selected = rule.normalize ? selectedSum(p, idx, topK, rule) : 1.0f;
    for (int64_t j = 0; j < topK; ++j) {
      w[j] = rule.normalize ? p[idx[j]] / selected : p[idx[j]];
      w[j] *= rule.scale;
    }
  }

  int64_t capacity = detail::expertCapacity(capacityFactor, T, E, topK);
  if (capacity < 0)
    return;
  // Slot-major admission: every token's first choice (in token order) is
  // admitted before any second choice, as in Switch/GShard.
  std::vector<int64_t> load(E, 0);
  for (int64_t j = 0; j < topK; ++j)
    for (int64_t t = 0; t < T; ++t) {
      int32_t &e = indices[t * topK + j];
      if (load[e] < capacity)
        ++load[e];
      else
        e = -1;
    }
}

void routerBackward(const float *dweights, const float *dprobs,
                    const float *probs, float *dlogits, int64_t T, int64_t E,
                    int64_t topK, const RoutingRule &rule) {
  std::vector<int32_t> idx(topK);
  std::vector<float> dp(E);
  detail::RoutingScratch scratch(E, rule);
  for (int64_t t = 0; t < T; ++t) {
    const float *p = probs + t * E;
    const float *dw = dweights + t * topK;
    if (dprobs)
      std::copy(dprobs + t * E, dprobs + (t + 1) * E, dp.begin());
    else
      std::fill(dp.begin(), dp.end(), 0.0f);

    detail::selectRouted(p, E, topK, rule, idx.data(), scratch);
    if (rule.normalize) {
      // w_j = scale * u_j with u_j = p[idx_j] / s:
      // dp[idx_j] += (du_j - sum_l du_l u_l) / s, du_j = scale * dw_j.
      float selected = selectedSum(p, idx.data(), topK, rule);
      float dot = 0.0f;
      for (int64_t j = 0; j < topK; ++j)
        dot += rule.scale * dw[j] * (p[idx[j]] / selected);
      for (int64_t j = 0; j < topK; ++j)
        dp[idx[j]] += (rule.scale * dw[j] - dot) / selected;
    } else {
      for (int64_t j = 0; j < topK; ++j)
        dp[idx[j]] += rule.scale * dw[j];
    }

    float *dl = dlogits + t * E;
    if (rule.sigmoid) {
      // d sigmoid(x) / dx = s (1 - s).
      for (int64_t e = 0; e < E; ++e)
        dl[e] = dp[e] * (p[e] * (1.0f - p[e]));
      continue;
    }
    // Through the softmax: dlogits = p (dp - sum_e p dp).
    double pdp = 0.0;
    for (int64_t e = 0; e < E; ++e)
      pdp += static_cast<double>(p[e]) * dp[e];
    float mean = static_cast<float>(pdp);
    for (int64_t e = 0; e < E; ++e)
      dl[e] = p[e] * (dp[e] - mean);
  }
}

} // namespace moe::rt::cpu
