//===- RopeFrequencies.cpp - RoPE's per-pair inverse frequencies ----------===//
//
// HF's formulas (modeling_rope_utils: _compute_linear_scaling_rope_parameters,
// _compute_yarn_parameters, _compute_llama3_parameters) in double; HF forms
// them in fp32, which differs by an ulp.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cpu/RopeFrequencies.h"

#include <algorithm>
#include <cmath>

namespace moe::rt::cpu {

namespace {

constexpr double kPi = 3.14159265358979323846;

/// YaRN: the pair index at which a frequency makes `rotations` turns over
/// the pretraining context (the paper's inverse dimension formula).
double correctionDim(double rotations, double dim, double theta,
                     double context) {
  return dim * std::log(context / (rotations * 2.0 * kPi)) /
         (2.0 * std::log(theta));
}

/// YaRN: each pair's share of its unscaled frequency, 1 for the fast pairs
/// below the ramp, 0 for the slow ones above it, linear in the pair index
/// between.
double yarnExtrapolation(int64_t pair, int64_t headDim, double theta,
                         const RopeScaling &s) {
  double dim = static_cast<double>(headDim);
  double context = static_cast<double>(s.originalMaxPositions);
  double low = correctionDim(s.betaFast, dim, theta, context);
  double high = correctionDim(s.betaSlow, dim, theta, context);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high)
    high += 0.001; // HF's guard against a zero-width ramp
  double ramp = std::clamp((static_cast<double>(pair) - low) / (high - low),
                           0.0, 1.0);
  return 1.0 - ramp;
}

/// llama3: the share is 1 for wavelengths below original / high_freq_factor,
/// 0 above original / low_freq_factor, linear in the frequency between.
double llama3Extrapolation(double invFreq, const RopeScaling &s) {
  double wavelength = 2.0 * kPi / invFreq;
  double smooth =
      (static_cast<double>(s.originalMaxPositions) / wavelength -
       s.lowFreqFactor) /
      (s.highFreqFactor - s.lowFreqFactor);
  return std::clamp(smooth, 0.0, 1.0);
}

} // namespace

std::vector<double> ropeInverseFrequencies(int64_t headDim, double theta,
                                           const RopeScaling &scaling) {
  int64_t half = headDim / 2;
  std::vector<double> invFreq(half);
  for (int64_t i = 0; i < half; ++i) {
    double unscaled = std::pow(theta, -2.0 * static_cast<double>(i) /
                                          static_cast<double>(headDim));
    // The share of the unscaled frequency each kind keeps; the rest is
    // interpolated (divided by the factor).
    double kept = 1.0;
    switch (scaling.kind) {
    case RopeScalingKind::None:
      break;
    case RopeScalingKind::Linear:
      kept = 0.0;
      break;
    case RopeScalingKind::Yarn:
      kept = yarnExtrapolation(i, headDim, theta, scaling);
      break;
    case RopeScalingKind::Llama3:
      kept = llama3Extrapolation(unscaled, scaling);
      break;
    }
    invFreq[i] = unscaled * (kept + (1.0 - kept) / scaling.factor);
  }
  return invFreq;
}

} // namespace moe::rt::cpu
