//===- FlashAttentionCases.h - BF16 attention test problems -----*- C++ -*-===//
//
// The problems both tests of the tensor-core attention run (the CPU
// emulation in FlashAttentionEmulationTest and the device in
// FlashAttentionKernelTest), their reference from the fp32 CPU kernels on
// the same BF16 inputs, and the bound the results are held to.
//
// The bound: BF16 rounds the probabilities and dS before their GEMMs and
// every output once (2^-9 relative each), so an element may differ from
// the fp32 reference by about 2^-8 of the tensor's largest magnitude; the
// bound is 2e-2 of it (the GPU check's tolerance). lse, a sum over rounded
// probabilities, is held to 5e-3 absolute. A wrong mask, tile or row moves
// elements by a large part of the tensor's scale, far past either.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_CUDA_FLASHATTENTIONCASES_H
#define MOE_UNITTESTS_CUDA_FLASHATTENTIONCASES_H

#include "moe/Runtime/Cpu/Kernels.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace moe::rt::cuda::testing {

struct FlashCase {
  int64_t B, S, heads, kvHeads, headDim;
  uint32_t seed;
  /// The inputs' standard deviation: large ones make peaked softmaxes, whose
  /// running maximum changes between key tiles.
  float amplitude = 1.0f;

  std::string describe() const {
    return "B " + std::to_string(B) + ", S " + std::to_string(S) + ", heads " +
           std::to_string(heads) + ", kvHeads " + std::to_string(kvHeads) +
           ", headDim " + std::to_string(headDim) + ", amplitude " +
           std::to_string(amplitude);
  }
  size_t qSize() const { return size_t(B * S * heads * headDim); }
  size_t kvSize() const { return size_t(B * S * kvHeads * headDim); }
  size_t rows() const { return size_t(B * heads * S); }
};

/// BF16 inputs (bits) and the fp32 CPU kernels' results on their values.
struct FlashProblem {
  std::vector<uint16_t> q, k, v, dout;
  std::vector<float> out, lse, dq, dk, dv;
};

inline std::vector<uint16_t> randomBf16(size_t n, uint32_t seed,
                                        float amplitude) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, amplitude);
  std::vector<float> values(n);
  for (float &x : values)
    x = normal(generator);
  std::vector<uint16_t> bits(n);
  cpu::castToBf16(values.data(), bits.data(), int64_t(n));
  return bits;
}

inline std::vector<float> widen(const std::vector<uint16_t> &bits) {
  std::vector<float> values(bits.size());
  cpu::castFromBf16(bits.data(), values.data(), int64_t(bits.size()));
  return values;
}

inline FlashProblem makeFlashProblem(const FlashCase &c) {
  FlashProblem p;
  p.q = randomBf16(c.qSize(), c.seed, c.amplitude);
  p.k = randomBf16(c.kvSize(), c.seed + 1, c.amplitude);
  p.v = randomBf16(c.kvSize(), c.seed + 2, 1.0f);
  p.dout = randomBf16(c.qSize(), c.seed + 3, 1.0f);
  std::vector<float> q = widen(p.q), k = widen(p.k), v = widen(p.v),
                     dout = widen(p.dout);
  p.out.resize(c.qSize());
  p.lse.resize(c.rows());
  cpu::attentionForward(q.data(), k.data(), v.data(), p.out.data(),
                        p.lse.data(), c.B, c.S, c.heads, c.kvHeads, c.headDim);
  p.dq.resize(c.qSize());
  p.dk.resize(c.kvSize());
  p.dv.resize(c.kvSize());
  cpu::attentionBackward(dout.data(), q.data(), k.data(), v.data(),
                         p.out.data(), p.lse.data(), p.dq.data(), p.dk.data(),
                         p.dv.data(), c.B, c.S, c.heads, c.kvHeads, c.headDim);
  return p;
}

/// Every element of `actual` within 2e-2 of the reference's largest
/// magnitude (NaN fails).
inline void expectNearReference(const std::vector<float> &actual,
                                const std::vector<float> &expected,
                                const char *what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  float scale = 0.0f;
  for (float x : expected)
    scale = std::max(scale, std::fabs(x));
  float bound = 2e-2f * scale;
  int reported = 0;
  for (size_t i = 0; i < actual.size() && reported < 5; ++i)
    if (!(std::fabs(actual[i] - expected[i]) <= bound)) {
      ADD_FAILURE() << what << "[" << i << "] is " << actual[i] << ", expected "
                    << expected[i] << " (bound " << bound << ")";
      ++reported;
    }
}

inline void expectLseNearReference(const std::vector<float> &actual,
                                   const std::vector<float> &expected) {
  ASSERT_EQ(actual.size(), expected.size());
  int reported = 0;
  for (size_t i = 0; i < actual.size() && reported < 5; ++i)
    if (!(std::fabs(actual[i] - expected[i]) <= 5e-3f)) {
      ADD_FAILURE() << "lse[" << i << "] is " << actual[i] << ", expected "
                    << expected[i];
      ++reported;
    }
}

/// The shapes both tests run: one tile; grouped queries over a partial
/// last tile; head dims padded to the kernels' 64 and 128 (and one that
/// takes the element-wise tile loads); peaked softmaxes.
inline std::vector<FlashCase> flashCases() {
  return {
      {1, 64, 1, 1, 64, 11},        {2, 130, 4, 2, 64, 21},
      {1, 100, 3, 1, 36, 31},       {1, 70, 2, 2, 128, 41},
      {1, 129, 2, 1, 96, 51, 4.0f},
  };
}

} // namespace moe::rt::cuda::testing

#endif // MOE_UNITTESTS_CUDA_FLASHATTENTIONCASES_H
