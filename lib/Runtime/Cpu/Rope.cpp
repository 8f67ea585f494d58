//===- Rope.cpp - Rotary position embedding (rotate-half) -----------------===//
//
// The angles are computed in double and rounded once, so cos/sin are the
// correctly rounded fp32 values even at positions in the thousands (HF forms
// p * inv_freq in fp32, which loses ~1e-4 rad there).
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cpu/RopeFrequencies.h"

#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::rt::cpu {

namespace {
/// cos and sin of angle[p, i] for p < S, i < headDim / 2, row-major [S, half].
struct RopeTable {
  std::vector<float> cos, sin;
  RopeTable(int64_t S, int64_t headDim, float theta,
            const RopeScaling &scaling) {
    int64_t half = headDim / 2;
    cos.resize(S * half);
    sin.resize(S * half);
    std::vector<double> invFreq =
        ropeInverseFrequencies(headDim, theta, scaling);
    // YaRN's attention factor scales cos and sin, as HF does.
    double magnitude = scaling.attentionFactor;
    for (int64_t p = 0; p < S; ++p)
      for (int64_t i = 0; i < half; ++i) {
        double angle = static_cast<double>(p) * invFreq[i];
        cos[p * half + i] = static_cast<float>(magnitude * std::cos(angle));
        sin[p * half + i] = static_cast<float>(magnitude * std::sin(angle));
      }
  }
};

/// Rotates every (i, i + half) pair of x by +angle (sign = 1) or by -angle
/// (sign = -1, the transpose). Each pair is read before it is written, so y
/// may alias x.
void rotate(const float *x, float *y, int64_t B, int64_t S, int64_t heads,
            int64_t headDim, float theta, float sign, const int32_t *positions,
            const std::vector<SequenceRun> &runs, const RopeScaling &scaling) {
  // Each row's position in the whole sequence (its own index unless the
  // runs place a rank's block), and the table up to the largest position.
  std::vector<int64_t> whole(S);
  for (int64_t s = 0; s < S; ++s)
    whole[s] = s;
  for (const SequenceRun &run : runs)
    for (int64_t i = 0; i < run.length; ++i)
      whole[run.local + i] = run.whole + i;
  int64_t limit = S;
  for (int64_t s = 0; s < S; ++s)
    limit = std::max(limit, whole[s] + 1);
  if (positions)
    for (int64_t t = 0; t < B * S; ++t)
      limit = std::max<int64_t>(limit, int64_t{positions[t]} + 1);
  RopeTable table(limit, headDim, theta, scaling);
  int64_t half = headDim / 2;
  // Rows (b, s) in parallel: each rotates only its own elements.
  detail::forEachShare(B * S, /*grain=*/64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t b = row / S, s = row % S;
      int64_t p = positions ? positions[row] : whole[s];
      const float *c = table.cos.data() + p * half;
      const float *sn = table.sin.data() + p * half;
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = ((b * S + s) * heads + h) * headDim;
        const float *xr = x + base;
        float *yr = y + base;
        for (int64_t i = 0; i < half; ++i) {
          float lo = xr[i], hi = xr[i + half];
          float si = sign * sn[i];
          yr[i] = lo * c[i] - hi * si;
          yr[i + half] = hi * c[i] + lo * si;
        }
        // An odd head dimension (never used by real models) leaves its last
        // element unrotated rather than unwritten.
        if (headDim % 2 != 0)
          yr[headDim - 1] = xr[headDim - 1];
      }
    }
  });
}
} // namespace

void ropeForward(const float *x, float *y, int64_t B, int64_t S, int64_t heads,
                 int64_t headDim, float theta, const int32_t *positions,
                 const std::vector<SequenceRun> &runs,
                 const RopeScaling &scaling) {
  rotate(x, y, B, S, heads, headDim, theta, 1.0f, positions, runs, scaling);
}

void ropeBackward(const float *dy, float *dx, int64_t B, int64_t S,
                  int64_t heads, int64_t headDim, float theta,
                  const int32_t *positions,
                  const std::vector<SequenceRun> &runs,
                  const RopeScaling &scaling) {
  rotate(dy, dx, B, S, heads, headDim, theta, -1.0f, positions, runs, scaling);
}

} // namespace moe::rt::cpu
