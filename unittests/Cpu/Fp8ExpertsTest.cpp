//===- Fp8ExpertsTest.cpp - FP8 expert GEMMs against a double reference ---===//
//
// The FP8 expert kernels (expertsForward and expertsBackward with Fp8Gemms),
// every recipe and the FP8 token dispatch, against a reference written from
// docs/fp8.md: each GEMM input is quantised with the emulation's own
// functions (Fp8.h), then each GEMM is computed in double. Both sides read
// the same FP8 values. What separates them is the kernels' fp32 arithmetic,
// which is bounded whatever the summation order:
//
//   |fl(sum_i p_i) - sum_i p_i| <= gamma_m sum_i |p_i|,
//   gamma_m = m u / (1 - m u),  u = 2^-24,
//
// where m is the most roundings one product p_i goes through on its way to
// the output: its own, then one per addition (Higham, "Accuracy and
// Stability of Numerical Algorithms", 2nd ed., section 3.1; an FMA only
// rounds less). The bound holds for any BLAS kernel, blocking and thread
// count, so these tests do not depend on the kernel OpenBLAS picks, and it is
// not fitted to a measurement: it is the worst case. The reference's own
// double arithmetic adds gamma_m with u = 2^-53.
//
// A chain of GEMMs needs more care: a = silu(u) g and the gradients du, dg
// are quantised from values the kernel computed in fp32. Were those one ulp
// off the reference's, a value next to an FP8 rounding midpoint (or a block's
// amax, hence its scale) could round one FP8 step away, far beyond the bound.
// So the inputs make the first GEMMs exact in fp32 in any order, and then the
// reference holds the kernel's very values:
//   * every scaling block of x, dy and the weights has an element of
//     magnitude maxFinite 2^-k (x: 448 2^-8, weights: 448 2^-10, dy: 448 2^-9
//     in E4M3 or 57344 2^-16 in E5M2, both 0.875), so each scale is the power
//     of two 2^k and the quantised values are FP8 values times 2^-k;
//   * the other magnitudes lie in [amax / 16, amax], so a quantised value is
//     a multiple of amax / 224 (E4M3; amax / 112 for E5M2) of at most 224
//     (112) units;
//   * so u = x W1^T, g = x W3^T and da' = dy W2 sum H = 64 products of at
//     most 224 x 224 units: 64 * 50176 < 2^24 units, exact in fp32.
// The reference checks this premise on every such sum. Then a, du and dg come
// from the kernels' own elementwise functions (swigluForward/Backward) on the
// same fp32 inputs, are quantised by the same functions, and match bit for
// bit; under delayed scaling the amax histories the kernels fold must match
// bit for bit too. Only the outputs' last GEMMs (z = a W2^T; dx, dW1, dW2,
// dW3) and the routing sums carry fp32 rounding, checked against the bound.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

using Scaling = Fp8Gemms::Scaling;
using Role = Fp8ExpertRole;

constexpr double kFloatRoundoff = 0x1p-24;
constexpr double kDoubleRoundoff = 0x1p-53;
// The largest magnitude of every scaling block (see the file comment).
constexpr float kInputAmax = 448.0f / 256.0f;   // 448 2^-8
constexpr float kWeightAmax = 448.0f / 1024.0f; // 448 2^-10
constexpr float kGradientAmax = 0.875f;         // 448 2^-9 = 57344 2^-16

double gamma(int64_t m, double unitRoundoff) {
  return m * unitRoundoff / (1.0 - m * unitRoundoff);
}

/// A row-major [rows, cols] matrix whose every blockRows x blockCols block
/// (edge blocks smaller) has its first element at +-amax and the others
/// uniform in [amax / 16, amax] with random signs.
std::vector<float> blockMaxMatrix(int64_t rows, int64_t cols,
                                  int64_t blockRows, int64_t blockCols,
                                  float amax, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> magnitude(amax / 16, amax);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> m(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      bool first = r % blockRows == 0 && c % blockCols == 0;
      float value = first ? amax : magnitude(gen);
      m[r * cols + c] = negative(gen) ? -value : value;
    }
  return m;
}

/// What the recipe under test is: the kernels' Fp8Gemms, spelled out.
struct Recipe {
  const char *name;
  Scaling scaling;
  bool dispatch;
};

/// The gradient format of docs/fp8.md: E5M2 with per-tensor scales, E4M3
/// with block scales and on the wire of targets without FP8 GEMMs.
Fp8Format gradientFormat(Scaling scaling) {
  return scaling == Scaling::Tensorwise || scaling == Scaling::Delayed
             ? Fp8Format::E5M2
             : Fp8Format::E4M3;
}

/// One layer's experts with routed tokens, built so that the premise of the
/// file comment holds.
struct Fp8Case {
  static constexpr int64_t T = 48, H = 64, F = 40, E = 4, K = 2;
  // Two blocks per row of H, edge blocks of 8 along F.
  static constexpr int64_t kBlock = 32;
  static constexpr int64_t kHistory = 4;
  std::vector<float> x, dy, weights, w1, w3, w2;
  std::vector<int32_t> indices;

  explicit Fp8Case(uint32_t seed)
      : x(blockMaxMatrix(T, H, 1, kBlock, kInputAmax, seed)),
        dy(blockMaxMatrix(T, H, 1, kBlock, kGradientAmax, seed + 1)),
        weights(T * K), indices(T * K) {
    for (int64_t e = 0; e < E; ++e) {
      auto append = [&](std::vector<float> &w, int64_t rows, int64_t cols,
                        uint32_t s) {
        std::vector<float> m =
            blockMaxMatrix(rows, cols, kBlock, kBlock, kWeightAmax, s);
        w.insert(w.end(), m.begin(), m.end());
      };
      append(w1, F, H, seed + 10 + e);
      append(w3, F, H, seed + 20 + e);
      append(w2, H, F, seed + 30 + e);
    }
    auto logits = randomVector(T * E, seed + 2, -2.0f, 2.0f);
    std::vector<float> probs(T * E);
    routerForward(logits.data(), probs.data(), weights.data(), indices.data(),
                  T, E, K, /*capacityFactor=*/0.0f);
  }

  /// The rows as FP8 token dispatch delivers them (ExpertParallel.cpp's
  /// dispatchFp8): each row packed to codes and block scales, and unpacked.
  void dispatch(Fp8Format gradients) {
    std::vector<int32_t> words(packedFp8Words(H, kBlock));
    for (int64_t t = 0; t < T; ++t) {
      packFp8Row(&x[t * H], H, kBlock, Fp8Format::E4M3, words.data());
      unpackFp8Row(words.data(), H, kBlock, Fp8Format::E4M3, &x[t * H]);
      packFp8Row(&dy[t * H], H, kBlock, gradients, words.data());
      unpackFp8Row(words.data(), H, kBlock, gradients, &dy[t * H]);
    }
  }

  /// Weights already on the FP8 grid (for a recipe whose GEMMs read full
  /// precision): their exact products need short values too.
  void weightsOnTheGrid() {
    for (std::vector<float> *w : {&w1, &w3, &w2})
      for (int64_t e = 0; e < E; ++e) {
        int64_t rows = w == &w2 ? H : F, cols = w == &w2 ? F : H;
        float *m = w->data() + e * F * H;
        quantizeBlockwise(m, m, rows, cols, kBlock, kBlock, Fp8Format::E4M3);
      }
  }
};

/// The kernels' outputs.
struct KernelResult {
  std::vector<float> y, dx, dweights, dw1, dw3, dw2;
};

KernelResult runKernels(const Fp8Case &c, const Fp8Gemms *fp8) {
  using C = Fp8Case;
  KernelResult r{std::vector<float>(C::T * C::H),
                 std::vector<float>(C::T * C::H),
                 std::vector<float>(C::T * C::K),
                 std::vector<float>(C::E * C::F * C::H),
                 std::vector<float>(C::E * C::F * C::H),
                 std::vector<float>(C::E * C::H * C::F)};
  expertsForward(c.x.data(), c.weights.data(), c.indices.data(), c.w1.data(),
                 c.w3.data(), c.w2.data(), r.y.data(), C::T, C::H, C::F, C::E,
                 C::K, fp8);
  expertsBackward(c.dy.data(), c.x.data(), c.weights.data(), c.indices.data(),
                  c.w1.data(), c.w3.data(), c.w2.data(), r.dx.data(),
                  r.dweights.data(), r.dw1.data(), r.dw3.data(), r.dw2.data(),
                  C::T, C::H, C::F, C::E, C::K, fp8);
  return r;
}

/// A reference output: each element's value in double, the sum of the
/// magnitudes of the products that make it up, and how many fp32 roundings
/// a product goes through in the kernel (m of the file comment), or, for a
/// sum the kernel takes in double, how many double ones before its one
/// rounding to fp32.
struct Reference {
  std::vector<double> value, magnitude;
  int64_t roundings = 0;
  bool summedInDouble = false;

  Reference(size_t n, int64_t roundings, bool summedInDouble = false)
      : value(n, 0.0), magnitude(n, 0.0), roundings(roundings),
        summedInDouble(summedInDouble) {}
  void add(size_t i, double product) {
    value[i] += product;
    magnitude[i] += std::fabs(product);
  }
};

/// The quantisation of each GEMM input as docs/fp8.md gives it: E4M3 for x,
/// a and the weights, the gradient format for dy, w dy, du and dg;
/// activations and gradients by 1 x block runs of a row, weights by block x
/// block squares, or per tensor, or (delayed) with the scale of the input's
/// own amax history. Nothing under a recipe whose GEMMs read full precision.
class RecipeQuantizer {
public:
  RecipeQuantizer(Scaling scaling, std::vector<float> history)
      : scaling(scaling), history(std::move(history)) {}

  Fp8Format gradients() const { return gradientFormat(scaling); }
  const std::vector<float> &amaxHistory() const { return history; }

  void activation(std::vector<float> &x, int64_t rows, int64_t cols,
                  Fp8Format format, int64_t e, Role role) {
    quantize(x.data(), rows, cols, 1, format, e, role);
  }
  std::vector<float> weight(const float *w, int64_t rows, int64_t cols,
                            int64_t e, Role role) {
    std::vector<float> q(w, w + rows * cols);
    quantize(q.data(), rows, cols, Fp8Case::kBlock, Fp8Format::E4M3, e, role);
    return q;
  }

private:
  void quantize(float *x, int64_t rows, int64_t cols, int64_t blockRows,
                Fp8Format format, int64_t e, Role role) {
    int64_t n = rows * cols;
    switch (scaling) {
    case Scaling::None:
      return;
    case Scaling::Tensorwise:
      quantizeTensorwise(x, x, n, format);
      return;
    case Scaling::Blockwise:
      quantizeBlockwise(x, x, rows, cols, blockRows, Fp8Case::kBlock, format);
      return;
    case Scaling::Delayed: {
      int64_t at = (e * kFp8ExpertRoles + static_cast<int64_t>(role)) *
                   Fp8Case::kHistory;
      quantizeDelayed(x, x, n, format, history.data() + at,
                      Fp8Case::kHistory);
      return;
    }
    }
  }

  Scaling scaling;
  std::vector<float> history;
};

/// The reference results, and whether the premise of the file comment held.
struct ReferenceResult {
  Reference y, dx, dweights, dw1, dw3, dw2;
  std::vector<float> history;
  std::string brokenPremise; // empty when every first GEMM was exact
};

/// sum_k a[r * ak + k] b[k * bk + c * bc] over k < K for every (r, c),
/// which must be exact in fp32 (the premise); as floats.
std::vector<float> exactGemm(const float *a, int64_t rows, int64_t K,
                             const float *b, int64_t cols, int64_t bRowStride,
                             int64_t bColStride, const char *what,
                             std::string &broken) {
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k)
        sum += static_cast<double>(a[r * K + k]) *
               b[k * bRowStride + c * bColStride];
      out[r * cols + c] = static_cast<float>(sum);
      if (static_cast<double>(out[r * cols + c]) != sum && broken.empty())
        broken = std::string(what) + " is not exact in fp32";
    }
  return out;
}

ReferenceResult reference(const Fp8Case &c, Scaling scaling,
                          std::vector<float> history) {
  using C = Fp8Case;
  const int64_t T = C::T, H = C::H, F = C::F, E = C::E, K = C::K;
  // Roundings per product: y = sum_j w_j (a W2^T)_j, a GEMM over F, a
  // product and K additions; dx = du W1 + dg W3 over 2F, added over K
  // slots; the weight gradients sum over an expert's rows (at most T, one
  // slot per token); dweights = a . da' is a double dot product over F.
  ReferenceResult ref{Reference(T * H, F + K + 1),
                      Reference(T * H, 2 * F + K + 1),
                      Reference(T * K, F, /*summedInDouble=*/true),
                      Reference(E * F * H, T),
                      Reference(E * F * H, T),
                      Reference(E * H * F, T),
                      {},
                      {}};
  RecipeQuantizer q(scaling, std::move(history));
  Fp8Format grads = q.gradients();
  std::string &broken = ref.brokenPremise;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> slots; // ascending, as the kernels group them
    for (int64_t s = 0; s < T * K; ++s)
      if (c.indices[s] == e)
        slots.push_back(s);
    int64_t n = static_cast<int64_t>(slots.size());
    if (n == 0)
      continue;
    std::vector<float> xe(n * H), dye(n * H);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < H; ++i) {
        xe[r * H + i] = c.x[(slots[r] / K) * H + i];
        dye[r * H + i] = c.dy[(slots[r] / K) * H + i];
      }
    q.activation(xe, n, H, Fp8Format::E4M3, e, Role::Input);
    std::vector<float> w1 = q.weight(&c.w1[e * F * H], F, H, e, Role::W1);
    std::vector<float> w3 = q.weight(&c.w3[e * F * H], F, H, e, Role::W3);
    std::vector<float> w2 = q.weight(&c.w2[e * H * F], H, F, e, Role::W2);
    // u[r, f] = sum_i x[r, i] W1[f, i]; g likewise; da'[r, f] = sum_i
    // dy[r, i] W2[i, f].
    std::vector<float> u = exactGemm(xe.data(), n, H, w1.data(), F, 1, H,
                                     "u = x W1^T", broken);
    std::vector<float> g = exactGemm(xe.data(), n, H, w3.data(), F, 1, H,
                                     "g = x W3^T", broken);
    std::vector<float> a(n * F);
    swigluForward(u.data(), g.data(), a.data(), n * F);
    q.activation(a, n, F, Fp8Format::E4M3, e, Role::Activation);
    std::vector<float> dyq = dye;
    q.activation(dyq, n, H, grads, e, Role::OutputGrad);
    std::vector<float> daPrime = exactGemm(dyq.data(), n, H, w2.data(), F, F,
                                           1, "da' = dy W2", broken);

    std::vector<float> da(n * F), dyw(n * H);
    for (int64_t r = 0; r < n; ++r) {
      int64_t s = slots[r], t = s / K;
      float w = c.weights[s];
      for (int64_t i = 0; i < H; ++i) {
        // y[t] += w z, z[i] = sum_f a[r, f] W2[i, f].
        for (int64_t f = 0; f < F; ++f)
          ref.y.add(t * H + i, static_cast<double>(w) * a[r * F + f] *
                                   w2[i * F + f]);
        dyw[r * H + i] = dye[r * H + i] * w; // fp32, as the kernel scales it
      }
      for (int64_t f = 0; f < F; ++f) {
        ref.dweights.add(s, static_cast<double>(a[r * F + f]) *
                                daPrime[r * F + f]);
        da[r * F + f] = daPrime[r * F + f] * w;
      }
    }
    q.activation(dyw, n, H, grads, e, Role::WeightedOutputGrad);
    std::vector<float> du(n * F), dg(n * F);
    swigluBackward(da.data(), u.data(), g.data(), du.data(), dg.data(), n * F);
    q.activation(du, n, F, grads, e, Role::UpGrad);
    q.activation(dg, n, F, grads, e, Role::GateGrad);
    for (int64_t r = 0; r < n; ++r) {
      int64_t t = slots[r] / K;
      for (int64_t f = 0; f < F; ++f)
        for (int64_t i = 0; i < H; ++i) {
          double dur = du[r * F + f], dgr = dg[r * F + f];
          ref.dx.add(t * H + i, dur * w1[f * H + i]);
          ref.dx.add(t * H + i, dgr * w3[f * H + i]);
          ref.dw1.add((e * F + f) * H + i, dur * xe[r * H + i]);
          ref.dw3.add((e * F + f) * H + i, dgr * xe[r * H + i]);
          ref.dw2.add((e * H + i) * F + f,
                      static_cast<double>(dyw[r * H + i]) * a[r * F + f]);
        }
    }
  }
  ref.history = q.amaxHistory();
  return ref;
}

/// Every element of the kernel's `got` within the fp32 bound of `want`.
void expectWithinRoundingBound(const char *what, const std::vector<float> &got,
                               const Reference &want) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  int64_t failures = 0;
  double worst = 0.0; // the largest |got - want| / bound
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    double mag = want.magnitude[i];
    // The reference's own double sum adds gamma_m(2^-53) too; a sum in
    // double (twice: kernel and reference) rounds once more, to fp32.
    double bound = want.summedInDouble
                       ? kFloatRoundoff * std::fabs(want.value[i]) +
                             3 * gamma(want.roundings, kDoubleRoundoff) * mag
                       : gamma(want.roundings, kFloatRoundoff) * mag +
                             gamma(want.roundings, kDoubleRoundoff) * mag;
    double diff = std::fabs(got[i] - want.value[i]);
    if (bound > 0.0)
      worst = std::max(worst, diff / bound);
    if (diff > bound && failures++ == 0)
      first << " (first: element " << i << ", kernel " << got[i]
            << ", reference " << want.value[i] << ", bound " << bound << ")";
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << got.size()
                         << " elements beyond the fp32 rounding bound"
                         << first.str();
  if (std::getenv("MOE_FP8_TEST_VERBOSE"))
    std::printf("%s: largest error %.3g of the bound\n", what, worst);
}

void expectMatchesReference(const KernelResult &got,
                            const ReferenceResult &want) {
  ASSERT_EQ(want.brokenPremise, "") << "the test's inputs no longer make "
                                       "the first GEMMs exact";
  expectWithinRoundingBound("y", got.y, want.y);
  expectWithinRoundingBound("dx", got.dx, want.dx);
  expectWithinRoundingBound("dweights", got.dweights, want.dweights);
  expectWithinRoundingBound("dw1", got.dw1, want.dw1);
  expectWithinRoundingBound("dw3", got.dw3, want.dw3);
  expectWithinRoundingBound("dw2", got.dw2, want.dw2);
}

Fp8Gemms gemmsOf(const Recipe &recipe, std::vector<float> *history) {
  Fp8Gemms fp8{recipe.scaling, Fp8Case::kBlock, recipe.dispatch};
  if (history) {
    fp8.history = history->data();
    fp8.historyLength = Fp8Case::kHistory;
  }
  return fp8;
}

class Fp8ExpertsTest : public ::testing::TestWithParam<Recipe> {};

// Forward and backward of one step, every recipe (and the FP8 token
// dispatch before the GEMMs), against the reference.
TEST_P(Fp8ExpertsTest, GemmsMatchADoubleGemmOverTheQuantisedInputs) {
  const Recipe &recipe = GetParam();
  Fp8Format gradients = gradientFormat(recipe.scaling);
  Fp8Case c(7);
  if (recipe.dispatch)
    c.dispatch(gradients);
  if (recipe.scaling == Scaling::None)
    c.weightsOnTheGrid();
  std::vector<float> history(Fp8Case::E * kFp8ExpertRoles * Fp8Case::kHistory,
                             0.0f);
  bool delayed = recipe.scaling == Scaling::Delayed;
  Fp8Gemms fp8 = gemmsOf(recipe, delayed ? &history : nullptr);
  ReferenceResult want = reference(c, recipe.scaling, history);
  KernelResult got = runKernels(c, &fp8);
  expectMatchesReference(got, want);
  if (delayed) {
    EXPECT_TRUE(bitwiseEqual(history, want.history));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, Fp8ExpertsTest,
    ::testing::Values(Recipe{"blockwise", Scaling::Blockwise, false},
                      Recipe{"tensorwise", Scaling::Tensorwise, false},
                      Recipe{"delayed", Scaling::Delayed, false},
                      Recipe{"blockwise_dispatch", Scaling::Blockwise, true},
                      Recipe{"tensorwise_dispatch", Scaling::Tensorwise, true},
                      // The A100's: FP8 on the wire only.
                      Recipe{"dispatch_only", Scaling::None, true}),
    [](const ::testing::TestParamInfo<Recipe> &info) {
      return std::string(info.param.name);
    });

// Delayed scaling over two steps: the second scales every input by the
// amaxes the first recorded (rolled into the history), not by its own; its
// new inputs overflow some of those ranges and saturate, as the recipe does.
TEST(Fp8ExpertsDelayedTest, SecondStepScalesByTheFirstStepsAmaxes) {
  Recipe recipe{"delayed", Scaling::Delayed, false};
  std::vector<float> history(Fp8Case::E * kFp8ExpertRoles * Fp8Case::kHistory,
                             0.0f);
  Fp8Gemms fp8 = gemmsOf(recipe, &history);
  Fp8Case first(7);
  runKernels(first, &fp8);
  for (int64_t i = 0; i < Fp8Case::E * kFp8ExpertRoles; ++i)
    rollAmaxHistory(history.data() + i * Fp8Case::kHistory, Fp8Case::kHistory);
  Fp8Case second(8); // new tokens, routes and gradients
  second.w1 = first.w1, second.w3 = first.w3, second.w2 = first.w2;
  ReferenceResult want = reference(second, Scaling::Delayed, history);
  KernelResult got = runKernels(second, &fp8);
  expectMatchesReference(got, want);
  EXPECT_TRUE(bitwiseEqual(history, want.history));
  // Not the first step's tensorwise fallback: the scales are the history's.
  ReferenceResult current =
      reference(second, Scaling::Delayed,
                std::vector<float>(history.size(), 0.0f));
  EXPECT_NE(current.y.value, want.y.value);
}

// FP8 token dispatch on any rows (not only those of the premise): a row
// arrives as codes c over its block's scale s, and the expert GEMM's blockwise
// rounding of it finds the amax code (the largest value) again, so its scale
// s' = fl(448 / fl(448 / s)) is s to two roundings, and c * s' / s is c to
// four roundings: the same FP8 code, since a code is on the grid and four
// fp32 roundings (4 * 2^-24 relative) move it nowhere near a midpoint. The
// value the GEMM reads is then c / s' against c / s without dispatch, each
// rounded once: at most 8 * 2^-24 relative apart.
TEST(Fp8ExpertsDispatchTest, DispatchedRowsRoundToTheSameCodes) {
  constexpr int64_t T = 16, H = 96, block = 32;
  std::vector<float> rows = randomVector(T * H, 5, -3.0f, 3.0f);
  for (int64_t i = 0; i < T * H; i += 7)
    rows[i] *= 1e-4f; // into E4M3's subnormals relative to a block's amax
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    SCOPED_TRACE(fp8FormatName(format));
    std::vector<float> dispatched(T * H), direct(T * H), arrived(T * H);
    std::vector<int32_t> words(packedFp8Words(H, block));
    for (int64_t t = 0; t < T; ++t) {
      packFp8Row(&rows[t * H], H, block, format, words.data());
      unpackFp8Row(words.data(), H, block, format, &dispatched[t * H]);
    }
    quantizeBlockwise(rows.data(), direct.data(), T, H, 1, block, format);
    quantizeBlockwise(dispatched.data(), arrived.data(), T, H, 1, block,
                      format);
    int64_t failures = 0;
    for (int64_t i = 0; i < T * H; ++i)
      failures += !(std::fabs(arrived[i] - direct[i]) <=
                    8 * kFloatRoundoff * std::fabs(direct[i]));
    EXPECT_EQ(failures, 0);
  }
}

// The bound tells the recipes apart: each one's kernel results fall outside
// the bound around another recipe's (and fp32's) reference. A reference
// that quantised the wrong inputs, or in the wrong format, would fail.
TEST(Fp8ExpertsBoundTest, SeparatesTheRecipes) {
  Fp8Case c(7);
  auto failures = [](const std::vector<float> &got, const Reference &want) {
    int64_t n = 0;
    for (size_t i = 0; i < got.size(); ++i)
      n += std::fabs(got[i] - want.value[i]) >
           2 * gamma(want.roundings, kFloatRoundoff) * want.magnitude[i];
    return n;
  };
  Fp8Gemms blockwise{Scaling::Blockwise, Fp8Case::kBlock};
  Fp8Gemms tensorwise{Scaling::Tensorwise, Fp8Case::kBlock};
  KernelResult block = runKernels(c, &blockwise);
  KernelResult tensor = runKernels(c, &tensorwise);
  ReferenceResult blockRef = reference(c, Scaling::Blockwise, {});
  ReferenceResult tensorRef = reference(c, Scaling::Tensorwise, {});
  EXPECT_GT(failures(tensor.y, blockRef.y), 0);
  EXPECT_GT(failures(tensor.dx, blockRef.dx), 0); // E5M2 against E4M3
  EXPECT_GT(failures(block.dw1, tensorRef.dw1), 0);
  KernelResult exact = runKernels(c, nullptr);
  EXPECT_GT(failures(exact.y, blockRef.y), 0);
}

} // namespace
