//===- LinearCrossEntropyTest.cpp - The LM head fused with cross-entropy --===//
//
// The fused kernel against the same loss and gradients computed in double
// from the same inputs, each element within the worst-case rounding of its
// float computation (Higham's gamma over the GEMMs' reductions), for one
// vocabulary block and for blocks that cut V unevenly; and against the
// unfused kernels bit for bit where the header promises it.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "../../lib/Runtime/Cpu/KernelUtils.h"
#include "TestUtils.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

constexpr double kUnitRoundoff = 5.960464477539063e-8; // 2^-24

/// Bound on the relative rounding error of a float sum of K products.
double gamma(int64_t K) { return (K + 2) * kUnitRoundoff; }

/// Inputs of the fused op: x [T, H], w [V, H], and targets of which some are
/// ignored (negative, or >= V).
struct Problem {
  int64_t T, H, V;
  std::vector<float> x, w;
  std::vector<int32_t> targets;
  /// Whether the float GEMM gives every logit exactly.
  bool exactLogits = false;
};

/// x uniform in [-1, 1) and w scaled so that logits have a standard deviation
/// of 2 (up to about 7); every 5th target is -100, every 7th is V + 3.
///
/// With `exactLogits`, x is rounded to multiples of 2^-4 and w to multiples of
/// 2^-8: every product is then a multiple of 2^-12 and every partial sum of
/// (H < 2^12 products below 1) is below 2^12 in magnitude, so it has at most
/// 24 significant bits and the float GEMM computes each logit exactly, in any
/// order. The reference's bounds then hold only the loss's own rounding.
Problem makeProblem(int64_t T, int64_t H, int64_t V, uint32_t seed,
                    bool exactLogits = false) {
  Problem p{T, H, V, randomVector(T * H, seed), {}, {}, exactLogits};
  float scale = 6.0f / std::sqrt(static_cast<float>(H));
  p.w = randomVector(V * H, seed + 1, -scale, scale);
  if (exactLogits) {
    for (float &x : p.x)
      x = std::round(x * 16.0f) / 16.0f;
    for (float &w : p.w)
      w = std::round(w * 256.0f) / 256.0f;
  }
  std::vector<float> picks = randomVector(T, seed + 2, 0.0f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    int32_t target = std::min(static_cast<int32_t>(picks[t] * V),
                              static_cast<int32_t>(V - 1));
    if (t % 5 == 1)
      target = -100;
    else if (t % 7 == 3)
      target = static_cast<int32_t>(V + 3);
    p.targets.push_back(target);
  }
  return p;
}

/// The fused op's results in double, each with a bound on how far a correct
/// float computation may be from it.
struct Reference {
  std::vector<double> lse, lseBound;
  double sum = 0.0, sumBound = 0.0;
  int64_t count = 0;
  std::vector<double> dx, dxBound, dw, dwBound;
};

Reference reference(const Problem &p, float dloss) {
  const int64_t T = p.T, H = p.H, V = p.V;
  Reference r;
  r.count = crossEntropyCount(p.targets.data(), T, V);
  double coef = static_cast<double>(dloss) / r.count;
  // The logits and the gradient g in double, the magnitude of g's terms
  // (coef * (p + onehot)), and per row the relative error bound of the float
  // g's elements with respect to that magnitude.
  std::vector<double> logits(T * V), gradient(T * V), magnitude(T * V);
  std::vector<double> gradientError(T);
  r.lse.resize(T);
  r.lseBound.resize(T);
  for (int64_t t = 0; t < T; ++t) {
    double logitError = 0.0, m = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) {
      double l = 0.0, absSum = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        double term = static_cast<double>(p.x[t * H + h]) * p.w[v * H + h];
        l += term;
        absSum += std::fabs(term);
      }
      logits[t * V + v] = l;
      m = std::max(m, l);
      if (!p.exactLogits)
        logitError = std::max(logitError, gamma(H) * absSum);
    }
    double z = 0.0;
    for (int64_t v = 0; v < V; ++v)
      z += std::exp(logits[t * V + v] - m);
    r.lse[t] = m + std::log(z);
    // lse is 1-Lipschitz in the logits, then rounded to float once.
    r.lseBound[t] = logitError + kUnitRoundoff * std::fabs(r.lse[t]) + 1e-12;
    // exp(logit - lse) from a logit and an lse each off by their bounds,
    // then the product, the float rounding and the target's subtraction.
    gradientError[t] = 1.01 * (logitError + r.lseBound[t]) + 3 * kUnitRoundoff;
    int32_t target = p.targets[t];
    bool counted = target >= 0 && target < V;
    if (counted) {
      r.sum += r.lse[t] - logits[t * V + target];
      r.sumBound += logitError + r.lseBound[t];
    }
    for (int64_t v = 0; v < V && counted; ++v) {
      double prob = std::exp(logits[t * V + v] - r.lse[t]);
      double onehot = v == target ? 1.0 : 0.0;
      gradient[t * V + v] = coef * (prob - onehot);
      magnitude[t * V + v] = std::fabs(coef) * (prob + onehot);
    }
  }
  double maxGradientError =
      *std::max_element(gradientError.begin(), gradientError.end());
  r.dx.assign(T * H, 0.0);
  r.dxBound.assign(T * H, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double dx = 0.0, absSum = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        dx += gradient[t * V + v] * p.w[v * H + h];
        absSum += magnitude[t * V + v] * std::fabs(p.w[v * H + h]);
      }
      r.dx[t * H + h] = dx;
      // Blocks add into dx: at most V products and V additions.
      r.dxBound[t * H + h] =
          1.01 * (gradientError[t] + gamma(2 * V)) * absSum + 1e-30;
    }
  r.dw.assign(V * H, 0.0);
  r.dwBound.assign(V * H, 0.0);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t h = 0; h < H; ++h) {
      double dw = 0.0, absSum = 0.0;
      for (int64_t t = 0; t < T; ++t) {
        dw += gradient[t * V + v] * p.x[t * H + h];
        absSum += magnitude[t * V + v] * std::fabs(p.x[t * H + h]);
      }
      r.dw[v * H + h] = dw;
      r.dwBound[v * H + h] =
          1.01 * (maxGradientError + gamma(T)) * absSum + 1e-30;
    }
  return r;
}

/// The fused kernel's forward and backward with one vocabulary block size.
struct Fused {
  CrossEntropySums sums;
  std::vector<float> lse, dx, dw;
};

Fused runFused(const Problem &p, float dloss, int64_t vocabBlock) {
  Fused f;
  // Filled with garbage: every element must be written.
  f.lse.assign(p.T, 7.0f);
  f.dx.assign(p.T * p.H, 7.0f);
  f.dw.assign(p.V * p.H, 7.0f);
  f.sums = linearCrossEntropySums(p.x.data(), p.w.data(), p.targets.data(),
                                  f.lse.data(), p.T, p.H, p.V, vocabBlock);
  linearCrossEntropyBackward(dloss, p.x.data(), p.w.data(), p.targets.data(),
                             f.lse.data(), f.dx.data(), f.dw.data(), p.T, p.H,
                             p.V, f.sums.count, vocabBlock);
  return f;
}

/// Expects |actual[i] - expected[i]| <= bound[i] for every i.
template <typename Expected>
void expectWithin(const std::string &name, const std::vector<float> &actual,
                  const std::vector<Expected> &expected,
                  const std::vector<double> &bound) {
  ASSERT_EQ(actual.size(), expected.size()) << name;
  int64_t failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double error = std::fabs(actual[i] - static_cast<double>(expected[i]));
    if (error <= bound[i])
      continue;
    if (++failures <= 3)
      ADD_FAILURE() << name << "[" << i << "] = " << actual[i] << ", expected "
                    << expected[i] << " within " << bound[i];
  }
  EXPECT_EQ(failures, 0) << name;
}

/// Blocks to try on V = 200: one block, 64 (64, 64, 64, 8), a block that is
/// no multiple of 64 and single columns (a max that grows block by block).
constexpr int64_t kBlocks[] = {0, 64, 100, 1};

TEST(LinearCrossEntropyTest, ForwardMatchesDoubleReference) {
  for (bool exact : {true, false}) {
    Problem p = makeProblem(37, 48, 200, 301, exact);
    Reference r = reference(p, 1.0f);
    ASSERT_GT(r.count, 0);
    ASSERT_LT(r.count, p.T);
    for (int64_t block : kBlocks) {
      SCOPED_TRACE("vocabBlock " + std::to_string(block) +
                   (exact ? ", exact logits" : ""));
      Fused f = runFused(p, 1.0f, block);
      EXPECT_EQ(f.sums.count, r.count);
      EXPECT_NEAR(f.sums.sum / f.sums.count, r.sum / r.count,
                  r.sumBound / r.count);
      EXPECT_NEAR(crossEntropyMean(f.sums), r.sum / r.count,
                  r.sumBound / r.count + kUnitRoundoff * r.sum / r.count);
      expectWithin("lse", f.lse, r.lse, r.lseBound);
    }
  }
}

TEST(LinearCrossEntropyTest, OneBlockIsCrossEntropySumsBitwise) {
  // Large enough that the GEMM and the row loop are cut at 2 threads.
  Problem p = makeProblem(300, 64, 320, 302);
  for (int threads : {1, 2}) {
    ThreadCount threadCount(threads);
    std::vector<float> logits(p.T * p.V), lse(p.T);
    detail::gemm(false, true, p.T, p.V, p.H, 1.0f, p.x.data(), p.H, p.w.data(),
                 p.H, 0.0f, logits.data(), p.V);
    CrossEntropySums unfused =
        crossEntropySums(logits.data(), p.targets.data(), p.T, p.V);
    CrossEntropySums fused = linearCrossEntropySums(
        p.x.data(), p.w.data(), p.targets.data(), lse.data(), p.T, p.H, p.V);
    EXPECT_EQ(fused.sum, unfused.sum) << threads << " threads";
    EXPECT_EQ(fused.count, unfused.count) << threads << " threads";
  }
}

// docs/semantics.md: with one block the fused backward differs from the
// unfused pair (crossEntropyBackward, then linearBackwardInput and
// linearBackwardWeight) only by each row's lse reaching it rounded to fp32.
// With exact logits each gradient element then moves by at most
// |lse| 2^-24 relative (plus the two roundings to float), and the two sets
// of GEMMs, of one shape, by that times sum |g||w| plus their own rounding.
TEST(LinearCrossEntropyTest, OneBlockBackwardIsTheUnfusedPairsUpToLseRounding) {
  const float dloss = 1.3f;
  Problem p = makeProblem(37, 48, 200, 310, /*exactLogits=*/true);
  Fused f = runFused(p, dloss, /*vocabBlock=*/0);
  std::vector<float> logits(p.T * p.V), dlogits(p.T * p.V);
  std::vector<float> dx(p.T * p.H), dw(p.V * p.H);
  linearForward(p.x.data(), p.w.data(), logits.data(), p.T, p.H, p.V);
  crossEntropyBackward(dloss, logits.data(), p.targets.data(), dlogits.data(),
                       p.T, p.V);
  linearBackwardInput(dlogits.data(), p.w.data(), dx.data(), p.T, p.H, p.V);
  linearBackwardWeight(dlogits.data(), p.x.data(), dw.data(), p.T, p.H, p.V);
  double lseMagnitude = 0.0;
  for (float value : f.lse)
    lseMagnitude = std::max(lseMagnitude, std::fabs(double(value)));
  double perElement = 1.01 * lseMagnitude * kUnitRoundoff + 2 * kUnitRoundoff;
  std::vector<double> dxBound(p.T * p.H), dwBound(p.V * p.H);
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t h = 0; h < p.H; ++h) {
      double magnitude = 0.0;
      for (int64_t v = 0; v < p.V; ++v)
        magnitude += std::fabs(dlogits[t * p.V + v] * p.w[v * p.H + h]);
      dxBound[t * p.H + h] =
          (perElement + 2 * gamma(p.V)) * magnitude * 1.01 + 1e-30;
    }
  for (int64_t v = 0; v < p.V; ++v)
    for (int64_t h = 0; h < p.H; ++h) {
      double magnitude = 0.0;
      for (int64_t t = 0; t < p.T; ++t)
        magnitude += std::fabs(dlogits[t * p.V + v] * p.x[t * p.H + h]);
      dwBound[v * p.H + h] =
          (perElement + 2 * gamma(p.T)) * magnitude * 1.01 + 1e-30;
    }
  expectWithin("dx", f.dx, dx, dxBound);
  expectWithin("dw", f.dw, dw, dwBound);
}

TEST(LinearCrossEntropyTest, BackwardMatchesDoubleReference) {
  const float dloss = 1.7f;
  for (bool exact : {true, false}) {
    Problem p = makeProblem(37, 48, 200, 303, exact);
    Reference r = reference(p, dloss);
    for (int64_t block : kBlocks) {
      SCOPED_TRACE("vocabBlock " + std::to_string(block) +
                   (exact ? ", exact logits" : ""));
      Fused f = runFused(p, dloss, block);
      expectWithin("dx", f.dx, r.dx, r.dxBound);
      expectWithin("dw", f.dw, r.dw, r.dwBound);
    }
  }
}

TEST(LinearCrossEntropyTest, BlocksMatchOneBlockWithinRounding) {
  Problem p = makeProblem(37, 48, 200, 304, /*exactLogits=*/true);
  const float dloss = 0.6f;
  Reference r = reference(p, dloss);
  Fused whole = runFused(p, dloss, 0);
  // Each is within its bound of the reference, so within twice of the other.
  auto twice = [](std::vector<double> bound) {
    for (double &b : bound)
      b *= 2.0;
    return bound;
  };
  for (int64_t block : {64, 100}) {
    SCOPED_TRACE("vocabBlock " + std::to_string(block));
    Fused cut = runFused(p, dloss, block);
    EXPECT_EQ(cut.sums.count, whole.sums.count);
    EXPECT_NEAR(cut.sums.sum, whole.sums.sum, 2.0 * r.sumBound);
    expectWithin("lse", cut.lse, whole.lse, twice(r.lseBound));
    expectWithin("dx", cut.dx, whole.dx, twice(r.dxBound));
    expectWithin("dw", cut.dw, whole.dw, twice(r.dwBound));
  }
}

TEST(LinearCrossEntropyTest, NoCountedTargetGivesZeroGradients) {
  Problem p = makeProblem(9, 16, 70, 305);
  p.targets.assign(p.T, -100);
  p.targets[4] = static_cast<int32_t>(p.V); // no logit: ignored as well
  for (int64_t block : {0, 64}) {
    SCOPED_TRACE("vocabBlock " + std::to_string(block));
    Fused f = runFused(p, 1.0f, block);
    EXPECT_EQ(f.sums.count, 0);
    EXPECT_EQ(f.sums.sum, 0.0);
    // lse is still written for every row.
    for (float l : f.lse) {
      EXPECT_TRUE(std::isfinite(l));
      EXPECT_NE(l, 7.0f);
    }
    for (float g : f.dx)
      EXPECT_EQ(g, 0.0f);
    for (float g : f.dw)
      EXPECT_EQ(g, 0.0f);
  }
  // A count of 0 (no counted row on any rank) zeroes them too, whatever the
  // targets.
  Problem counted = makeProblem(9, 16, 70, 306);
  std::vector<float> lse(counted.T), dx(counted.T * counted.H, 7.0f),
      dw(counted.V * counted.H, 7.0f);
  linearCrossEntropySums(counted.x.data(), counted.w.data(),
                         counted.targets.data(), lse.data(), counted.T,
                         counted.H, counted.V);
  linearCrossEntropyBackward(1.0f, counted.x.data(), counted.w.data(),
                             counted.targets.data(), lse.data(), dx.data(),
                             dw.data(), counted.T, counted.H, counted.V, 0);
  EXPECT_EQ(dx, std::vector<float>(dx.size(), 0.0f));
  EXPECT_EQ(dw, std::vector<float>(dw.size(), 0.0f));
}

TEST(LinearCrossEntropyTest, IgnoredRowsContributeNothing) {
  Problem p = makeProblem(37, 48, 200, 307);
  for (int64_t block : {0, 64}) {
    SCOPED_TRACE("vocabBlock " + std::to_string(block));
    Fused f = runFused(p, 1.0f, block);
    // Other inputs on the ignored rows: the loss, dw and the other rows of
    // dx keep their bits, and the ignored rows of dx are zero.
    Problem other = p;
    for (int64_t t = 0; t < p.T; ++t)
      if (!detail::isCounted(p.targets[t], p.V))
        for (int64_t h = 0; h < p.H; ++h)
          other.x[t * p.H + h] =
              3.0f * std::sin(static_cast<float>(t * p.H + h));
    Fused g = runFused(other, 1.0f, block);
    EXPECT_EQ(g.sums.sum, f.sums.sum);
    EXPECT_EQ(g.sums.count, f.sums.count);
    EXPECT_TRUE(bitwiseEqual(g.dw, f.dw));
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t h = 0; h < p.H; ++h) {
        float dx = g.dx[t * p.H + h];
        if (detail::isCounted(p.targets[t], p.V))
          EXPECT_EQ(dx, f.dx[t * p.H + h]) << t << ", " << h;
        else
          EXPECT_EQ(dx, 0.0f) << t << ", " << h;
      }
  }
}

TEST(LinearCrossEntropyTest, NoTokens) {
  const int64_t H = 8, V = 70;
  std::vector<float> w = randomVector(V * H, 308), dw(V * H, 7.0f);
  CrossEntropySums sums =
      linearCrossEntropySums(nullptr, w.data(), nullptr, nullptr, 0, H, V);
  EXPECT_EQ(sums.count, 0);
  EXPECT_EQ(sums.sum, 0.0);
  linearCrossEntropyBackward(1.0f, nullptr, w.data(), nullptr, nullptr, nullptr,
                             dw.data(), 0, H, V, 5);
  EXPECT_EQ(dw, std::vector<float>(dw.size(), 0.0f));
}

TEST(LinearCrossEntropyTest, BitwiseRepeatableAtTwoThreads) {
  ThreadCount threadCount(2);
  Problem p = makeProblem(300, 64, 320, 309);
  for (int64_t block : {0, 64}) {
    SCOPED_TRACE("vocabBlock " + std::to_string(block));
    Fused first = runFused(p, 1.3f, block);
    Fused second = runFused(p, 1.3f, block);
    EXPECT_EQ(first.sums.sum, second.sums.sum);
    EXPECT_TRUE(bitwiseEqual(first.lse, second.lse));
    EXPECT_TRUE(bitwiseEqual(first.dx, second.dx));
    EXPECT_TRUE(bitwiseEqual(first.dw, second.dw));
  }
}

TEST(LinearCrossEntropyBlockTest, AllOfVWhenItFits) {
  EXPECT_EQ(linearCrossEntropyBlock(37, 200), 200);
  // Exactly 8 MiB of logits still fits.
  EXPECT_EQ(linearCrossEntropyBlock(2048, 1024), 1024);
  EXPECT_EQ(linearCrossEntropyBlock(0, 152064), 152064);
  EXPECT_EQ(linearCrossEntropyWorkspaceBytes(37, 200), 37u * 200u * 4u);
}

TEST(LinearCrossEntropyBlockTest, CutsLargeVocabulariesIntoMultiplesOf64) {
  struct Shape {
    int64_t T, V;
  };
  for (Shape s : {Shape{4096, 152064}, Shape{2048, 1025}, Shape{3000, 50257},
                  Shape{int64_t{1} << 20, 1000}, Shape{int64_t{1} << 20, 40}}) {
    SCOPED_TRACE(std::to_string(s.T) + " x " + std::to_string(s.V));
    int64_t block = linearCrossEntropyBlock(s.T, s.V);
    auto bytes = [&](int64_t columns) {
      return static_cast<uint64_t>(s.T) * columns * sizeof(float);
    };
    EXPECT_EQ(linearCrossEntropyWorkspaceBytes(s.T, s.V), bytes(block));
    EXPECT_LE(block, s.V);
    if (block == s.V)
      continue;
    EXPECT_EQ(block % 64, 0);
    EXPECT_GE(block, 64);
    // Within the budget unless at the floor of 64, and the most that fits.
    EXPECT_TRUE(block == 64 || bytes(block) <= kLinearCrossEntropyBlockBytes);
    EXPECT_GT(bytes(block + 64), kLinearCrossEntropyBlockBytes);
  }
  EXPECT_EQ(linearCrossEntropyBlock(4096, 152064), 512);
  EXPECT_EQ(linearCrossEntropyBlock(int64_t{1} << 20, 1000), 64);
  EXPECT_EQ(linearCrossEntropyBlock(int64_t{1} << 20, 40), 40);
}

} // namespace
