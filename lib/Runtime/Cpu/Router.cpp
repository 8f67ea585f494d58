//===- Router.cpp - Softmax top-k router (HF MixtralSparseMoeBlock) -------===//
//
// Forward: softmax over all experts, top-k with ties to the lower expert id,
// renormalised weights, then optional capacity dropping admitted slot-major.
// Backward: the top-k is recomputed from the saved probabilities (the indices
// saved by the forward may be -1 where capacity dropped a slot, but the
// renormalised weight still depends on that expert's probability).
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"

#include <algorithm>
#include <cmath>
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

void routerForward(const float *logits, float *probs, float *weights,
                   int32_t *indices, int64_t T, int64_t E, int64_t topK,
                   float capacityFactor) {
  for (int64_t t = 0; t < T; ++t) {
    const float *x = logits + t * E;
    float *p = probs + t * E;
    float m = *std::max_element(x, x + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(x[e] - m);
      sum += p[e];
    }
    float denom = static_cast<float>(sum);
    for (int64_t e = 0; e < E; ++e)
      p[e] /= denom;

    int32_t *idx = indices + t * topK;
    float *w = weights + t * topK;
    detail::selectTopK(p, E, topK, idx);
    float selected = 0.0f;
    for (int64_t j = 0; j < topK; ++j)
      selected += p[idx[j]];
    for (int64_t j = 0; j < topK; ++j)
      w[j] = p[idx[j]] / selected;
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
                    int64_t topK) {
  std::vector<int32_t> idx(topK);
  std::vector<float> dp(E);
  for (int64_t t = 0; t < T; ++t) {
    const float *p = probs + t * E;
    const float *dw = dweights + t * topK;
    if (dprobs)
      std::copy(dprobs + t * E, dprobs + (t + 1) * E, dp.begin());
    else
      std::fill(dp.begin(), dp.end(), 0.0f);

    // Through the renormalisation w_j = p[idx_j] / s:
    // dp[idx_j] += (dw_j - sum_l dw_l w_l) / s.
    detail::selectTopK(p, E, topK, idx.data());
    float selected = 0.0f;
    for (int64_t j = 0; j < topK; ++j)
      selected += p[idx[j]];
    float dot = 0.0f;
    for (int64_t j = 0; j < topK; ++j)
      dot += dw[j] * (p[idx[j]] / selected);
    for (int64_t j = 0; j < topK; ++j)
      dp[idx[j]] += (dw[j] - dot) / selected;

    // Through the softmax: dlogits = p (dp - sum_e p dp).
    double pdp = 0.0;
    for (int64_t e = 0; e < E; ++e)
      pdp += static_cast<double>(p[e]) * dp[e];
    float mean = static_cast<float>(pdp);
    float *dl = dlogits + t * E;
    for (int64_t e = 0; e < E; ++e)
      dl[e] = p[e] * (dp[e] - mean);
  }
}

} // namespace moe::rt::cpu
