//===- RopeFrequencies.h - RoPE's per-pair inverse frequencies ---*- C++ -*-===//
//
// The rotation frequencies of unscaled and scaled RoPE (HF
// modeling_rope_utils: default, linear, yarn, llama3), for the CPU kernel
// and the decoder. docs/semantics.md gives the formulas.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CPU_ROPEFREQUENCIES_H
#define MOE_RUNTIME_CPU_ROPEFREQUENCIES_H

#include <cstdint>
#include <vector>

namespace moe::rt::cpu {

/// How RoPE's frequencies are stretched for a longer context than the
/// model was pretrained on. The values are the artifact's (OpTable.td
/// RopeScaling).
enum class RopeScalingKind : int64_t { None = 0, Linear = 1, Yarn = 2, Llama3 = 3 };

/// The parameters of one scaling, under HF's names; each kind reads its
/// own (linear: factor; yarn: factor, originalMaxPositions, betaFast,
/// betaSlow, truncate; llama3: factor, originalMaxPositions, lowFreqFactor,
/// highFreqFactor). attentionFactor multiplies cos and sin (YaRN's).
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  double factor = 1.0;
  int64_t originalMaxPositions = 0;
  double betaFast = 0.0, betaSlow = 0.0;
  bool truncate = true;
  double lowFreqFactor = 0.0, highFreqFactor = 0.0;
  double attentionFactor = 1.0;
};

/// The inverse frequency of each of the headDim / 2 rotated pairs:
/// theta^(-2i/headDim), stretched as `scaling` says.
std::vector<double> ropeInverseFrequencies(int64_t headDim, double theta,
                                           const RopeScaling &scaling = {});

} // namespace moe::rt::cpu

#endif // MOE_RUNTIME_CPU_ROPEFREQUENCIES_H
