//===- ExpertsTest.cpp - Tests of the grouped SwiGLU experts --------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

struct ExpertsCase {
  int64_t T, H, F, E, K;
  std::vector<float> x, weights, w1, w3, w2, dy;
  std::vector<int32_t> indices;

  /// Routing from real router outputs with capacity factor cf.
  ExpertsCase(int64_t T, int64_t H, int64_t F, int64_t E, int64_t K, float cf,
              uint32_t seed)
      : T(T), H(H), F(F), E(E), K(K), x(randomVector(T * H, seed)),
        weights(T * K), w1(randomVector(E * F * H, seed + 1, -0.5f, 0.5f)),
        w3(randomVector(E * F * H, seed + 2, -0.5f, 0.5f)),
        w2(randomVector(E * H * F, seed + 3, -0.5f, 0.5f)),
        dy(randomVector(T * H, seed + 4)), indices(T * K) {
    auto logits = randomVector(T * E, seed + 5, -2.0f, 2.0f);
    std::vector<float> probs(T * E);
    routerForward(logits.data(), probs.data(), weights.data(), indices.data(),
                  T, E, K, cf);
  }

  std::vector<float> forward() const {
    std::vector<float> y(T * H);
    expertsForward(x.data(), weights.data(), indices.data(), w1.data(),
                   w3.data(), w2.data(), y.data(), T, H, F, E, K);
    return y;
  }

  /// Per-token, per-slot loop in double, straight from docs/semantics.md.
  std::vector<double> naiveForward() const {
    std::vector<double> y(T * H, 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < K; ++j) {
        int64_t e = indices[t * K + j];
        if (e < 0)
          continue;
        std::vector<double> a(F);
        for (int64_t f = 0; f < F; ++f) {
          double u = 0.0, g = 0.0;
          for (int64_t i = 0; i < H; ++i) {
            u += w1[(e * F + f) * H + i] * static_cast<double>(x[t * H + i]);
            g += w3[(e * F + f) * H + i] * static_cast<double>(x[t * H + i]);
          }
          a[f] = u / (1.0 + std::exp(-u)) * g;
        }
        for (int64_t i = 0; i < H; ++i) {
          double z = 0.0;
          for (int64_t f = 0; f < F; ++f)
            z += w2[(e * H + i) * F + f] * a[f];
          y[t * H + i] += weights[t * K + j] * z;
        }
      }
    return y;
  }

  struct Grads {
    std::vector<float> dx, dweights, dw1, dw3, dw2;
  };
  Grads backward() const {
    Grads g{std::vector<float>(T * H), std::vector<float>(T * K, 5.0f),
            std::vector<float>(E * F * H, 5.0f),
            std::vector<float>(E * F * H, 5.0f),
            std::vector<float>(E * H * F, 5.0f)};
    expertsBackward(dy.data(), x.data(), weights.data(), indices.data(),
                    w1.data(), w3.data(), w2.data(), g.dx.data(),
                    g.dweights.data(), g.dw1.data(), g.dw3.data(),
                    g.dw2.data(), T, H, F, E, K);
    return g;
  }

  double loss() const {
    auto y = forward();
    return dotDouble(dy.data(), y.data(), T * H);
  }

  int64_t dropped() const {
    return std::count(indices.begin(), indices.end(), -1);
  }
};

TEST(ExpertsTest, ForwardMatchesNaive) {
  ExpertsCase c(12, 6, 10, 4, 2, /*cf=*/0.0f, 91);
  auto y = c.forward();
  auto ref = c.naiveForward();
  for (int64_t i = 0; i < c.T * c.H; ++i)
    EXPECT_NEAR(y[i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i]))) << i;
}

TEST(ExpertsTest, ForwardSkipsDroppedSlots) {
  ExpertsCase c(12, 6, 10, 4, 2, /*cf=*/0.6f, 92);
  ASSERT_GT(c.dropped(), 0);
  auto y = c.forward();
  auto ref = c.naiveForward();
  for (int64_t i = 0; i < c.T * c.H; ++i)
    EXPECT_NEAR(y[i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i]))) << i;
}

TEST(ExpertsTest, TokenWithAllSlotsDroppedGetsZero) {
  ExpertsCase c(3, 4, 5, 2, 2, 0.0f, 93);
  c.indices = {0, 1, -1, -1, 1, 0};
  auto y = c.forward();
  for (int64_t i = 0; i < c.H; ++i)
    EXPECT_EQ(y[1 * c.H + i], 0.0f);
}

TEST(ExpertsTest, BackwardMatchesFiniteDifferencesWithDrops) {
  // topK = 2, capacity factor 0.6: C = ceil(0.6 * 8 * 2 / 3) = 4 of the 16
  // assignments per expert, so some are dropped.
  ExpertsCase c(8, 5, 7, 3, 2, 0.6f, 94);
  ASSERT_GT(c.dropped(), 0);
  auto g = c.backward();
  for (int64_t s = 0; s < c.T * c.K; ++s) {
    if (c.indices[s] < 0) {
      EXPECT_EQ(g.dweights[s], 0.0f) << "dropped slot " << s;
    }
  }
  auto loss = [&] { return c.loss(); };
  GradCheckOptions options;
  EXPECT_GRADIENT("dx", c.x, g.dx, loss, options);
  EXPECT_GRADIENT("dweights", c.weights, g.dweights, loss, options);
  EXPECT_GRADIENT("dw1", c.w1, g.dw1, loss, options);
  EXPECT_GRADIENT("dw3", c.w3, g.dw3, loss, options);
  EXPECT_GRADIENT("dw2", c.w2, g.dw2, loss, options);
}

TEST(ExpertsTest, UnusedExpertGetsZeroGradient) {
  ExpertsCase c(4, 3, 4, 3, 1, 0.0f, 95);
  c.indices = {0, 2, 0, 2}; // expert 1 receives nothing
  auto g = c.backward();
  int64_t fh = c.F * c.H;
  for (int64_t i = 0; i < fh; ++i) {
    EXPECT_EQ(g.dw1[fh + i], 0.0f);
    EXPECT_EQ(g.dw3[fh + i], 0.0f);
    EXPECT_EQ(g.dw2[fh + i], 0.0f);
  }
}

TEST(ExpertsTest, Deterministic) {
  ExpertsCase c(64, 16, 24, 8, 2, 1.0f, 96);
  EXPECT_TRUE(bitwiseEqual(c.forward(), c.forward()));
  auto a = c.backward(), b = c.backward();
  EXPECT_TRUE(bitwiseEqual(a.dx, b.dx));
  EXPECT_TRUE(bitwiseEqual(a.dweights, b.dweights));
  EXPECT_TRUE(bitwiseEqual(a.dw1, b.dw1));
  EXPECT_TRUE(bitwiseEqual(a.dw3, b.dw3));
  EXPECT_TRUE(bitwiseEqual(a.dw2, b.dw2));
}

} // namespace

namespace {

/// sqrt(sum (a - b)^2 / sum b^2).
double relativeError(const std::vector<float> &a, const std::vector<float> &b) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

struct ExpertsResult {
  std::vector<float> y, dx, dweights, dw1, dw3, dw2;
};

/// Zero results of `c`'s shapes.
ExpertsResult resultsFor(const ExpertsCase &c) {
  ExpertsResult r;
  r.y.resize(c.T * c.H);
  r.dx.resize(c.T * c.H);
  r.dweights.resize(c.T * c.K);
  r.dw1.resize(c.E * c.F * c.H);
  r.dw3.resize(c.E * c.F * c.H);
  r.dw2.resize(c.E * c.H * c.F);
  return r;
}

ExpertsResult runExperts(const ExpertsCase &c, const Fp8Gemms *fp8) {
  ExpertsResult r = resultsFor(c);
  expertsForward(c.x.data(), c.weights.data(), c.indices.data(), c.w1.data(),
                 c.w3.data(), c.w2.data(), r.y.data(), c.T, c.H, c.F, c.E, c.K,
                 fp8);
  expertsBackward(c.dy.data(), c.x.data(), c.weights.data(), c.indices.data(),
                  c.w1.data(), c.w3.data(), c.w2.data(), r.dx.data(),
                  r.dweights.data(), r.dw1.data(), r.dw3.data(), r.dw2.data(),
                  c.T, c.H, c.F, c.E, c.K, fp8);
  return r;
}

} // namespace

/// Whether a result moved off the fp32 one by what FP8 inputs do, and not by
/// garbage: a relative error far above fp32 rounding (1e-3, against ~1e-7)
/// and far below 1 (0.25, against E4M3's 2^-4 and E5M2's 2^-3 relative per
/// input). A sanity range, wide on both sides, not a precision claim:
/// Fp8ExpertsTest.cpp checks the FP8 kernels' values against a double
/// reference with a derived bound.
void expectFp8Distance(const char *what, const std::vector<float> &fp8,
                       const std::vector<float> &exact) {
  double error = relativeError(fp8, exact);
  EXPECT_GT(error, 1e-3) << what;
  EXPECT_LT(error, 0.25) << what;
}

// FP8 GEMM inputs (E4M3 values, E5M2 gradients) move every output off fp32
// by about the formats' precision.
TEST(ExpertsTest, Fp8GemmsStayCloseToFp32) {
  ExpertsCase c(37, 24, 20, 4, 2, 0.0f, 91);
  ExpertsResult exact = runExperts(c, nullptr);
  Fp8Gemms tensorwise{Fp8Gemms::Scaling::Tensorwise, 128};
  Fp8Gemms blockwise{Fp8Gemms::Scaling::Blockwise, 8};
  for (const Fp8Gemms *fp8 : {&tensorwise, &blockwise}) {
    SCOPED_TRACE(fp8 == &tensorwise ? "tensorwise" : "blockwise");
    ExpertsResult r = runExperts(c, fp8);
    expectFp8Distance("y", r.y, exact.y);
    expectFp8Distance("dx", r.dx, exact.dx);
    expectFp8Distance("dweights", r.dweights, exact.dweights);
    expectFp8Distance("dw1", r.dw1, exact.dw1);
    expectFp8Distance("dw3", r.dw3, exact.dw3);
    expectFp8Distance("dw2", r.dw2, exact.dw2);
    // Deterministic, like every kernel.
    EXPECT_EQ(runExperts(c, fp8).dw1, r.dw1);
  }
}

// Delayed scaling: the first step has no history and scales by the current
// amaxes, exactly as tensorwise scaling does; every GEMM input of every
// expert that received tokens records its amax. A later step scales by the
// history, not by its own tensors.
TEST(ExpertsTest, Fp8DelayedScalingRecordsAmaxesAndUsesThem) {
  ExpertsCase c(37, 24, 20, 4, 2, 0.0f, 91);
  constexpr int64_t kLength = 4;
  std::vector<float> history(c.E * kFp8ExpertRoles * kLength, 0.0f);
  Fp8Gemms delayed{Fp8Gemms::Scaling::Delayed, 128};
  delayed.history = history.data();
  delayed.historyLength = kLength;
  Fp8Gemms tensorwise{Fp8Gemms::Scaling::Tensorwise, 128};
  ExpertsResult first = runExperts(c, &delayed);
  ExpertsResult current = runExperts(c, &tensorwise);
  EXPECT_EQ(first.y, current.y);
  EXPECT_EQ(first.dw1, current.dw1);
  EXPECT_EQ(first.dx, current.dx);
  for (int64_t e = 0; e < c.E; ++e)
    for (int64_t role = 0; role < kFp8ExpertRoles; ++role) {
      const float *amaxes = history.data() + (e * kFp8ExpertRoles + role) * kLength;
      EXPECT_GT(amaxes[0], 0.0f) << "expert " << e << " role " << role;
      EXPECT_EQ(amaxes[1], 0.0f);
    }
  // The weights' amaxes are the weights' own.
  float w1Amax = absMax(c.w1.data(), c.F * c.H);
  EXPECT_EQ(history[static_cast<int64_t>(Fp8ExpertRole::W1) * kLength], w1Amax);

  // Next step: a history twice as large halves every scale, so the results
  // move, and stay close to fp32.
  for (int64_t i = 0; i < c.E * kFp8ExpertRoles; ++i) {
    history[i * kLength + 1] = 2.0f * history[i * kLength];
    history[i * kLength] = 0.0f;
  }
  ExpertsResult exact = runExperts(c, nullptr);
  ExpertsResult later = runExperts(c, &delayed);
  EXPECT_NE(later.y, first.y);
  expectFp8Distance("y", later.y, exact.y);
  expectFp8Distance("dw1", later.dw1, exact.dw1);
}

// FP8 only on the wire (targets without FP8 GEMMs): the kernels read full
// precision.
TEST(ExpertsTest, Fp8DispatchOnlyLeavesTheGemmsExact) {
  ExpertsCase c(37, 24, 20, 4, 2, 0.0f, 91);
  Fp8Gemms none{Fp8Gemms::Scaling::None, 128, /*dispatch=*/true};
  ExpertsResult exact = runExperts(c, nullptr);
  ExpertsResult r = runExperts(c, &none);
  EXPECT_EQ(r.y, exact.y);
  EXPECT_EQ(r.dw2, exact.dw2);
}

namespace {

/// The forward's saved up projections and the backward that reads them.
struct KeptRun {
  std::vector<float> hidden;
  ExpertsResult grads;
};

KeptRun runKeepingHidden(const ExpertsCase &c, const Fp8Gemms *fp8) {
  KeptRun r;
  ExpertsResult &g = r.grads = resultsFor(c);
  // Poisoned: every element must be written, dropped slots included.
  r.hidden.assign(c.T * c.K * 2 * c.F, std::nanf(""));
  expertsForward(c.x.data(), c.weights.data(), c.indices.data(), c.w1.data(),
                 c.w3.data(), c.w2.data(), g.y.data(), c.T, c.H, c.F, c.E, c.K,
                 fp8, /*bf16Rows=*/false, r.hidden.data());
  expertsBackward(c.dy.data(), c.x.data(), c.weights.data(), c.indices.data(),
                  c.w1.data(), c.w3.data(), c.w2.data(), g.dx.data(),
                  g.dweights.data(), g.dw1.data(), g.dw3.data(), g.dw2.data(),
                  c.T, c.H, c.F, c.E, c.K, fp8, /*bf16Rows=*/false,
                  r.hidden.data());
  return r;
}

} // namespace

// The saved rows are each slot's W1 x and W3 x (a naive double dot product
// agrees to fp32 rounding: a bound of 1e-5 relative to the terms' absolute
// sum), zeros for dropped slots.
TEST(ExpertsTest, KeptHiddenHoldsEachSlotsUpProjections) {
  ExpertsCase c(40, 16, 12, 4, 2, 1.0f, 97);
  ASSERT_GT(c.dropped(), 0);
  KeptRun r = runKeepingHidden(c, nullptr);
  for (int64_t s = 0; s < c.T * c.K; ++s) {
    int64_t e = c.indices[s], t = s / c.K;
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t f = 0; f < c.F; ++f) {
        float saved = r.hidden[(s * 2 + half) * c.F + f];
        if (e < 0) {
          EXPECT_EQ(saved, 0.0f) << "dropped slot " << s;
          continue;
        }
        const std::vector<float> &w = half == 0 ? c.w1 : c.w3;
        double dot = 0.0, scale = 0.0;
        for (int64_t i = 0; i < c.H; ++i) {
          double term = static_cast<double>(w[(e * c.F + f) * c.H + i]) *
                        c.x[t * c.H + i];
          dot += term;
          scale += std::abs(term);
        }
        EXPECT_NEAR(saved, dot, 1e-5 * scale) << "slot " << s << " f " << f;
      }
  }
}

// Reading the saved rows gives the bits of recomputing them: the forward
// saves what its own GEMMs computed, which the backward's recomputation
// repeats; with FP8 GEMMs too (the same rounded inputs).
TEST(ExpertsTest, KeptHiddenGivesTheBitsOfRecomputing) {
  ExpertsCase c(64, 16, 24, 8, 2, 1.0f, 96);
  Fp8Gemms blockwise{Fp8Gemms::Scaling::Blockwise, 8};
  for (const Fp8Gemms *fp8 : {static_cast<const Fp8Gemms *>(nullptr),
                              static_cast<const Fp8Gemms *>(&blockwise)}) {
    SCOPED_TRACE(fp8 ? "fp8 blockwise" : "fp32");
    ExpertsResult recomputed = runExperts(c, fp8);
    KeptRun kept = runKeepingHidden(c, fp8);
    EXPECT_TRUE(bitwiseEqual(kept.grads.y, recomputed.y));
    EXPECT_TRUE(bitwiseEqual(kept.grads.dx, recomputed.dx));
    EXPECT_TRUE(bitwiseEqual(kept.grads.dweights, recomputed.dweights));
    EXPECT_TRUE(bitwiseEqual(kept.grads.dw1, recomputed.dw1));
    EXPECT_TRUE(bitwiseEqual(kept.grads.dw3, recomputed.dw3));
    EXPECT_TRUE(bitwiseEqual(kept.grads.dw2, recomputed.dw2));
  }
}

// The backward reads the rows it is given: zero up projections make a zero
// activation, so zero gradients of every expert weight.
TEST(ExpertsTest, BackwardReadsTheKeptHidden) {
  ExpertsCase c(32, 16, 12, 4, 2, 0.0f, 95);
  std::vector<float> hidden(c.T * c.K * 2 * c.F, 0.0f);
  std::vector<float> dx(c.T * c.H), dweights(c.T * c.K);
  std::vector<float> dw1(c.E * c.F * c.H, 5.0f), dw3(dw1), dw2(dw1);
  expertsBackward(c.dy.data(), c.x.data(), c.weights.data(), c.indices.data(),
                  c.w1.data(), c.w3.data(), c.w2.data(), dx.data(),
                  dweights.data(), dw1.data(), dw3.data(), dw2.data(), c.T, c.H,
                  c.F, c.E, c.K, nullptr, false, hidden.data());
  for (const std::vector<float> *grad : {&dw1, &dw3, &dw2})
    EXPECT_TRUE(std::all_of(grad->begin(), grad->end(),
                            [](float v) { return v == 0.0f; }));
  EXPECT_EQ(c.backward().dw1 == dw1, false);
}
