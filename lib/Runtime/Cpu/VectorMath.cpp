//===- VectorMath.cpp - exp over arrays, vectorised -----------------------===//
//
// std::exp is a library call per element, which no compiler vectorises: in
// attention's softmax and the experts' SwiGLU it took most of their
// element-wise time. Here exp is branch-free arithmetic (Cephes' expf:
// x = n ln 2 + r with |r| <= ln 2 / 2, e^r by a polynomial, 2^n put into the
// exponent bits), so the loops vectorise (this file is built with
// -fno-trapping-math: the clamps' comparisons may become vector selects),
// and they are compiled for AVX-512F, AVX2 and the baseline, the best the CPU
// supports picked at load time (by feature: a VM's CPU model names no
// microarchitecture). Relative error
// below 1e-7 against the exact value (VectorMathTest measures 8e-8). A NaN
// stays NaN; above 88.376 the result is infinity, and below ln(FLT_MIN) 0
// (subnormals flushed), so silu(-200) is exactly -0 as with std::exp.
//
// The same machine runs the same clone, so results are bitwise reproducible
// there; another CPU's clone may round the polynomial differently (fused
// multiply-adds, which make it 1.6x faster on AVX-512).
//
//===----------------------------------------------------------------------===//

#include "KernelUtils.h"

#include "moe/Runtime/Cpu/Kernels.h"

#include <cstdint>
#include <cstring>
#include <limits>

namespace moe::rt::cpu::detail {
namespace {

__attribute__((always_inline)) inline int32_t bitsOf(float value) {
  int32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

__attribute__((always_inline)) inline float floatOf(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

__attribute__((always_inline)) inline float expOf(float x) {
  constexpr float kMax = 88.3762626647949f, kMin = -87.3365447504019f;
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 in two parts, the first exact in few bits, so n * kLn2High is exact.
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  // Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits.
  constexpr float kRound = 12582912.0f;
  // Comparisons that a NaN fails keep it.
  float in = x;
  x = x > kMax ? kMax : x;
  x = x < kMin ? kMin : x;
  float shifted = x * kLog2e + kRound;
  float n = shifted - kRound;
  float r = x - n * kLn2High - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  // 2^n: n + 127 in the exponent field (n is in [-126, 127] after the clamp).
  uint32_t exponent =
      static_cast<uint32_t>(bitsOf(shifted) - bitsOf(kRound) + 127) << 23;
  y *= floatOf(static_cast<int32_t>(exponent));
  // Past the clamps, what std::exp gives: infinity, and 0 where the exact
  // value would be subnormal.
  y = in > kMax ? std::numeric_limits<float>::infinity() : y;
  return in < kMin ? 0.0f : y;
}

} // namespace

#define MOE_VECTOR_CLONES                                                      \
  __attribute__((target_clones("avx512f", "avx2", "default")))

MOE_VECTOR_CLONES void expShifted(const float *in, float *out, int64_t n,
                                  float shift) {
  for (int64_t j = 0; j < n; ++j)
    out[j] = expOf(in[j] - shift);
}

// The reductions keep kLanes partial results over interleaved elements and
// combine them in a fixed order: vectorisable, and the same bits on every
// run (a sequential sum is one long dependency chain).
namespace {
constexpr int kLanes = 16;
} // namespace

MOE_VECTOR_CLONES float rowMax(const float *x, int64_t n) {
  float lanes[kLanes];
  for (float &lane : lanes)
    lane = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  for (int l = 0; j < n; ++j, ++l)
    lanes[l] = x[j] > lanes[l] ? x[j] : lanes[l];
  float most = lanes[0];
  for (int l = 1; l < kLanes; ++l)
    most = lanes[l] > most ? lanes[l] : most;
  return most;
}

MOE_VECTOR_CLONES double expShiftedSum(const float *in, float *out, int64_t n,
                                       float shift) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      float value = expOf(in[j + l] - shift);
      out[j + l] = value;
      lanes[l] += value;
    }
  for (int l = 0; j < n; ++j, ++l) {
    out[j] = expOf(in[j] - shift);
    lanes[l] += out[j];
  }
  // Pairwise, in a fixed order.
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l)
      lanes[l] += lanes[l + width];
  return lanes[0];
}

} // namespace moe::rt::cpu::detail

namespace moe::rt::cpu {

// silu(a) = a / (1 + exp(-a)) (HF's form) and sigmoid 1 / (1 + exp(-a)),
// with the vectorised exp.
MOE_VECTOR_CLONES void swigluForward(const float *gate, const float *up,
                                     float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float a = gate[i];
    y[i] = a / (1.0f + detail::expOf(-a)) * up[i];
  }
}

MOE_VECTOR_CLONES void swigluBackward(const float *dy, const float *gate,
                                      const float *up, float *dgate, float *dup,
                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float a = gate[i];
    float s = 1.0f / (1.0f + detail::expOf(-a));
    // silu'(a) = s (1 + a (1 - s)); read every input before writing so the
    // outputs may alias dy.
    float g = dy[i];
    float u = up[i];
    dgate[i] = g * u * (s * (1.0f + a * (1.0f - s)));
    dup[i] = g * (a * s);
  }
}

} // namespace moe::rt::cpu
