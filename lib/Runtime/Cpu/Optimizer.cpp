//===- Optimizer.cpp - Gradient norm, LR schedule and AdamW ---------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "ThreadPool.h"

#include <cmath>

namespace moe::rt::cpu {

static constexpr double kPi = 3.14159265358979323846;

double sumOfSquares(const float *g, int64_t n) {
  // Eight double accumulators over interleaved elements, combined in a
  // fixed order: reproducible (no dependence on threads or alignment),
  // exact enough for billions of elements, and free of the serial add
  // chain that keeps one accumulator at a fraction of memory bandwidth.
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      lanes[l] += static_cast<double>(g[i + l]) * g[i + l];
  for (int l = 0; i < n; ++i, ++l)
    lanes[l] += static_cast<double>(g[i]) * g[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

float learningRate(int64_t step, float peak, float min, int64_t warmup,
                   int64_t decay) {
  if (step < warmup)
    return static_cast<float>(static_cast<double>(peak) *
                              static_cast<double>(step + 1) /
                              static_cast<double>(warmup));
  if (step >= decay)
    return min;
  // warmup <= step < decay, so decay - warmup > 0.
  double progress = static_cast<double>(step - warmup) /
                    static_cast<double>(decay - warmup);
  double cosine = 0.5 * (1.0 + std::cos(kPi * progress));
  return static_cast<float>(static_cast<double>(min) +
                            (static_cast<double>(peak) - min) * cosine);
}

void sumsOfSquares(const float *const *g, const int64_t *n, int64_t count,
                   double *sums) {
  // One tensor per task: each sum is sumOfSquares's, whichever thread runs
  // it.
  detail::parallelFor(
      count, [&](int64_t i, int) { sums[i] = sumOfSquares(g[i], n[i]); });
}

namespace {
// Vectorised clones for AVX-512F, AVX2 and the baseline. This file is built
// with -fno-math-errno (so sqrt is an instruction the loop can vectorise)
// and -ffp-contract=off (no fused multiply-adds), so every clone computes
// each element with the same correctly rounded operations: the same bits on
// every x86 CPU.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
adamwRange(float *param, const float *grad, float *expAvg, float *expAvgSq,
           int64_t n, float lr, float beta1, float beta2, float eps,
           float weightDecay, int64_t step, float gradScale) {
  // Scalars in double as PyTorch computes them (Python floats); the
  // per-element arithmetic in fp32 in torch.optim.AdamW's order.
  double t = static_cast<double>(step + 1);
  double bias1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  double bias2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  float stepSize = static_cast<float>(static_cast<double>(lr) / bias1);
  float bias2Sqrt = static_cast<float>(std::sqrt(bias2));
  float decayFactor = static_cast<float>(
      1.0 - static_cast<double>(lr) * static_cast<double>(weightDecay));
  float oneMinusBeta1 = 1.0f - beta1, oneMinusBeta2 = 1.0f - beta2;
  for (int64_t i = 0; i < n; ++i) {
    // Exact when gradScale is 1 (no clipping).
    float g = grad[i] * gradScale;
    float p = param[i];
    if (weightDecay != 0.0f)
      p *= decayFactor;
    float m = beta1 * expAvg[i] + oneMinusBeta1 * g;
    float v = beta2 * expAvgSq[i] + oneMinusBeta2 * g * g;
    float denom = std::sqrt(v) / bias2Sqrt + eps;
    p -= stepSize * (m / denom);
    expAvg[i] = m;
    expAvgSq[i] = v;
    param[i] = p;
  }
}
} // namespace

void adamw(float *param, const float *grad, float *expAvg, float *expAvgSq,
           int64_t n, float lr, float beta1, float beta2, float eps,
           float weightDecay, int64_t step, float gradScale) {
  // Elementwise, so shares on several threads give one pass's bits.
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         adamwRange(param + begin, grad + begin, expAvg + begin,
                                    expAvgSq + begin, end - begin, lr, beta1,
                                    beta2, eps, weightDecay, step, gradScale);
                       });
}

} // namespace moe::rt::cpu
