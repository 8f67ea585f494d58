//===- RmsNorm.cpp - RMSNorm (HF MixtralRMSNorm) and its VJP --------------===//
//
// Row statistics are accumulated in double: one extra conversion per element,
// but the normaliser of a 4096-wide row no longer depends on summation error.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "ThreadPool.h"

#include <cmath>
#include <vector>

namespace moe::rt::cpu {

/// r = 1 / sqrt(mean(x^2) + eps) of one row.
static float rmsReciprocal(const float *x, int64_t H, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < H; ++i)
    sum += static_cast<double>(x[i]) * x[i];
  double mean = H > 0 ? sum / static_cast<double>(H) : 0.0;
  return static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
}

void rmsNormForward(const float *x, const float *w, float *y, int64_t T,
                    int64_t H, float eps) {
  detail::forEachShare(T, detail::rowGrain(H), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *xr = x + t * H;
      float *yr = y + t * H;
      float r = rmsReciprocal(xr, H, eps);
      // HF order: normalise first, then scale by the weight.
      for (int64_t i = 0; i < H; ++i)
        yr[i] = w[i] * (xr[i] * r);
    }
  });
}

void rmsNormBackward(const float *dy, const float *x, const float *w, float *dx,
                     float *dw, int64_t T, int64_t H, float eps) {
  // Rows in parallel for dx (and each row's r); then dw, which sums over
  // every token, by columns in parallel, each column's sum in token order
  // (in double, rounded once), so the threads do not change its bits.
  std::vector<float> rows(T);
  detail::forEachShare(T, detail::rowGrain(H), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *xr = x + t * H;
      const float *dyr = dy + t * H;
      float *dxr = dx + t * H;
      float r = rmsReciprocal(xr, H, eps);
      rows[t] = r;
      // mean_j(g[j] xhat[j]) with g = dy * w.
      double dot = 0.0;
      for (int64_t i = 0; i < H; ++i) {
        float xhat = xr[i] * r;
        dot += static_cast<double>(dyr[i] * w[i]) * xhat;
      }
      float meanDot =
          H > 0 ? static_cast<float>(dot / static_cast<double>(H)) : 0.0f;
      for (int64_t i = 0; i < H; ++i) {
        float xhat = xr[i] * r;
        dxr[i] = r * (dyr[i] * w[i] - xhat * meanDot);
      }
    }
  });
  detail::forEachShare(H, /*grain=*/16, [&](int64_t begin, int64_t end) {
    std::vector<double> sums(end - begin, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const float *xr = x + t * H;
      const float *dyr = dy + t * H;
      for (int64_t i = begin; i < end; ++i)
        sums[i - begin] += static_cast<double>(dyr[i]) * (xr[i] * rows[t]);
    }
    for (int64_t i = begin; i < end; ++i)
      dw[i] = static_cast<float>(sums[i - begin]);
  });
}

} // namespace moe::rt::cpu
