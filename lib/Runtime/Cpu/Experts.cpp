//===- Experts.cpp - SwiGLU experts over routed tokens --------------------===//
//
// Token-to-expert assignments are grouped by expert with a stable counting
// sort over the flat slots t * topK + j, so each expert's rows are in token
// order. Each expert then runs as dense sgemms over its gathered rows, and the
// results are scattered back expert by expert (HF's index_add_ order). Every
// step has a fixed order, so the outputs are bitwise reproducible.
//
// The backward reads u = W1 x and g = W3 x from the forward's saved `hidden`
// when the compiler kept them (moe-save-expert-activations), else recomputes
// them per expert with the forward's GEMM calls, so both give the same bits.
// It gets dw_j = dy . (W2 a) as a . (W2^T dy), reusing the GEMM that da needs
// anyway.
//
// With FP8 emulation each GEMM input is rounded onto the FP8 grid first
// (Fp8Gemms): x, a and the weights in E4M3, dy and the SwiGLU gradients
// (du, dg) in E5M2 with per-tensor scales, E4M3 with blockwise ones. The
// backward rounds x, a and the weights exactly as the forward did (delayed
// scales do not change within a step), so it differentiates the function
// the forward computed.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cpu/Fp8.h"

#include "KernelUtils.h"

#include <algorithm>
#include <vector>

namespace moe::rt::cpu {

namespace {
/// Assignments grouped by expert: slots[offsets[e] .. offsets[e+1]) are the
/// flat slot ids t * topK + j routed to expert e, ascending.
struct ExpertGroups {
  std::vector<int64_t> offsets;
  std::vector<int64_t> slots;
  int64_t maxRows = 0;

  ExpertGroups(const int32_t *indices, int64_t T, int64_t E, int64_t topK)
      : offsets(E + 1, 0) {
    int64_t numSlots = T * topK;
    // Ids outside [0, E) (capacity drops are -1) take part in nothing.
    auto valid = [&](int32_t e) { return e >= 0 && e < E; };
    for (int64_t s = 0; s < numSlots; ++s)
      if (valid(indices[s]))
        ++offsets[indices[s] + 1];
    for (int64_t e = 0; e < E; ++e) {
      maxRows = std::max(maxRows, offsets[e + 1]);
      offsets[e + 1] += offsets[e];
    }
    slots.resize(offsets[E]);
    std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
    for (int64_t s = 0; s < numSlots; ++s)
      if (valid(indices[s]))
        slots[cursor[indices[s]]++] = s;
  }

  int64_t begin(int64_t e) const { return offsets[e]; }
  int64_t rows(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};

/// dst[r, :] = src[slot_r / topK, :] for the n slots starting at slots.
void gatherRows(const float *src, const int64_t *slots, int64_t n,
                int64_t topK, int64_t width, float *dst) {
  for (int64_t r = 0; r < n; ++r) {
    const float *row = src + (slots[r] / topK) * width;
    std::copy(row, row + width, dst + r * width);
  }
}

/// How the GEMM inputs of expert `e` are rounded onto the FP8 grid
/// (nothing without FP8 GEMMs): activations and gradients [rows, cols] by
/// rows, weights by squares, or per tensor; under delayed scaling with the
/// scale of the input's amax history, `role`.
class Fp8Rounding {
public:
  explicit Fp8Rounding(const Fp8Gemms *fp8)
      : fp8(fp8 && fp8->roundsGemms() ? fp8 : nullptr) {}

  bool enabled() const { return fp8 != nullptr; }
  Fp8Format gradientFormat() const {
    return fp8 ? fp8GradientFormat(*fp8) : Fp8Format::E5M2;
  }

  /// Rounds an activation or gradient in place.
  void activation(float *x, int64_t rows, int64_t cols, Fp8Format format,
                  int64_t e, Fp8ExpertRole role) const {
    if (fp8)
      round(x, x, rows, cols, 1, format, e, role);
  }

  /// The weight as the GEMMs read it: `w` itself, or its E4M3 rounding in
  /// `scratch`.
  const float *weight(const float *w, int64_t rows, int64_t cols,
                      std::vector<float> &scratch, int64_t e,
                      Fp8ExpertRole role) const {
    if (!fp8)
      return w;
    scratch.resize(rows * cols);
    round(w, scratch.data(), rows, cols, fp8->block, Fp8Format::E4M3, e, role);
    return scratch.data();
  }

private:
  void round(const float *in, float *out, int64_t rows, int64_t cols,
             int64_t blockRows, Fp8Format format, int64_t e,
             Fp8ExpertRole role) const {
    switch (fp8->scaling) {
    case Fp8Gemms::Scaling::Blockwise:
      quantizeBlockwise(in, out, rows, cols, blockRows, fp8->block, format);
      return;
    case Fp8Gemms::Scaling::Delayed:
      quantizeDelayed(in, out, rows * cols, format,
                      fp8->history + (e * kFp8ExpertRoles +
                                      static_cast<int64_t>(role)) *
                                         fp8->historyLength,
                      fp8->historyLength);
      return;
    case Fp8Gemms::Scaling::Tensorwise:
    case Fp8Gemms::Scaling::None:
      quantizeTensorwise(in, out, rows * cols, format);
      return;
    }
  }

  const Fp8Gemms *fp8;
};

/// Slot s of hidden [slots, 2, F] holds (W1 x, W3 x) at s * 2F and s * 2F + F.
void saveHidden(const float *u, const float *g, const int64_t *slots, int64_t n,
                int64_t F, float *hidden) {
  for (int64_t r = 0; r < n; ++r) {
    float *saved = hidden + slots[r] * 2 * F;
    std::copy(u + r * F, u + (r + 1) * F, saved);
    std::copy(g + r * F, g + (r + 1) * F, saved + F);
  }
}

void loadHidden(const float *hidden, const int64_t *slots, int64_t n, int64_t F,
                float *u, float *g) {
  for (int64_t r = 0; r < n; ++r) {
    const float *saved = hidden + slots[r] * 2 * F;
    std::copy(saved, saved + F, u + r * F);
    std::copy(saved + F, saved + 2 * F, g + r * F);
  }
}

/// u = x W1[e]^T and g = x W3[e]^T for n gathered rows.
void upProjections(const float *xe, const float *w1e, const float *w3e,
                   float *u, float *g, int64_t n, int64_t H, int64_t F) {
  detail::gemm(/*transA=*/false, /*transB=*/true, n, F, H, 1.0f, xe, H, w1e, H,
               0.0f, u, F);
  detail::gemm(/*transA=*/false, /*transB=*/true, n, F, H, 1.0f, xe, H, w3e, H,
               0.0f, g, F);
}
} // namespace

void expertsForward(const float *x, const float *weights,
                    const int32_t *indices, const float *w1, const float *w3,
                    const float *w2, float *y, int64_t T, int64_t H, int64_t F,
                    int64_t E, int64_t topK, const Fp8Gemms *fp8, bool bf16Rows,
                    float *hidden) {
  std::fill(y, y + T * H, 0.0f);
  ExpertGroups groups(indices, T, E, topK);
  if (hidden)
    for (int64_t s = 0; s < T * topK; ++s)
      if (indices[s] < 0 || indices[s] >= E)
        std::fill(hidden + s * 2 * F, hidden + (s + 1) * 2 * F, 0.0f);
  int64_t cap = groups.maxRows;
  std::vector<float> xe(cap * H), u(cap * F), g(cap * F), ze(cap * H);
  std::vector<float> w1q, w3q, w2q;
  Fp8Rounding rounding(fp8);
  using Role = Fp8ExpertRole;
  for (int64_t e = 0; e < E; ++e) {
    int64_t n = groups.rows(e);
    if (n == 0)
      continue;
    const int64_t *slots = groups.slots.data() + groups.begin(e);
    gatherRows(x, slots, n, topK, H, xe.data());
    rounding.activation(xe.data(), n, H, Fp8Format::E4M3, e, Role::Input);
    upProjections(xe.data(),
                  rounding.weight(w1 + e * F * H, F, H, w1q, e, Role::W1),
                  rounding.weight(w3 + e * F * H, F, H, w3q, e, Role::W3),
                  u.data(), g.data(), n, H, F);
    if (hidden)
      saveHidden(u.data(), g.data(), slots, n, F, hidden);
    // a = silu(u) * g, in place of u.
    swigluForward(u.data(), g.data(), u.data(), n * F);
    rounding.activation(u.data(), n, F, Fp8Format::E4M3, e, Role::Activation);
    detail::gemm(/*transA=*/false, /*transB=*/true, n, H, F, 1.0f, u.data(), F,
                 rounding.weight(w2 + e * H * F, H, F, w2q, e, Role::W2), F,
                 0.0f, ze.data(), H);
    if (bf16Rows)
      roundToBf16(ze.data(), n * H);
    for (int64_t r = 0; r < n; ++r) {
      float w = weights[slots[r]];
      float *yr = y + (slots[r] / topK) * H;
      const float *zr = ze.data() + r * H;
      for (int64_t i = 0; i < H; ++i)
        yr[i] += w * zr[i];
    }
  }
}

void expertsBackward(const float *dy, const float *x, const float *weights,
                     const int32_t *indices, const float *w1, const float *w3,
                     const float *w2, float *dx, float *dweights, float *dw1,
                     float *dw3, float *dw2, int64_t T, int64_t H, int64_t F,
                     int64_t E, int64_t topK, const Fp8Gemms *fp8,
                     bool bf16Rows, const float *hidden) {
  std::fill(dx, dx + T * H, 0.0f);
  // Dropped slots keep dweights = 0 (docs/semantics.md, Router backward).
  std::fill(dweights, dweights + T * topK, 0.0f);
  ExpertGroups groups(indices, T, E, topK);
  int64_t cap = groups.maxRows;
  std::vector<float> xe(cap * H), dye(cap * H), dxe(cap * H);
  std::vector<float> u(cap * F), g(cap * F), a(cap * F), da(cap * F);
  std::vector<float> w1q, w3q, w2q;
  Fp8Rounding rounding(fp8);
  Fp8Format gradFormat = rounding.gradientFormat();
  using Role = Fp8ExpertRole;
  for (int64_t e = 0; e < E; ++e) {
    float *dw1e = dw1 + e * F * H, *dw3e = dw3 + e * F * H;
    float *dw2e = dw2 + e * H * F;
    int64_t n = groups.rows(e);
    if (n == 0) {
      std::fill(dw1e, dw1e + F * H, 0.0f);
      std::fill(dw3e, dw3e + F * H, 0.0f);
      std::fill(dw2e, dw2e + H * F, 0.0f);
      continue;
    }
    const float *w1e = rounding.weight(w1 + e * F * H, F, H, w1q, e, Role::W1);
    const float *w3e = rounding.weight(w3 + e * F * H, F, H, w3q, e, Role::W3);
    const float *w2e = rounding.weight(w2 + e * H * F, H, F, w2q, e, Role::W2);
    const int64_t *slots = groups.slots.data() + groups.begin(e);
    gatherRows(x, slots, n, topK, H, xe.data());
    rounding.activation(xe.data(), n, H, Fp8Format::E4M3, e, Role::Input);
    gatherRows(dy, slots, n, topK, H, dye.data());
    if (hidden)
      loadHidden(hidden, slots, n, F, u.data(), g.data());
    else
      upProjections(xe.data(), w1e, w3e, u.data(), g.data(), n, H, F);
    swigluForward(u.data(), g.data(), a.data(), n * F);
    rounding.activation(a.data(), n, F, Fp8Format::E4M3, e, Role::Activation);
    // The unweighted dy for da', then w dy for dW2: each rounded as the
    // GEMM reading it sees it.
    std::vector<float> dyWeighted;
    if (rounding.enabled()) {
      dyWeighted.assign(dye.begin(), dye.begin() + n * H);
      rounding.activation(dye.data(), n, H, gradFormat, e, Role::OutputGrad);
    }

    // da' = dy W2[e] (unweighted); dw_j = a . da'; da = w_j da'.
    detail::gemm(/*transA=*/false, /*transB=*/false, n, F, H, 1.0f, dye.data(),
                 H, w2e, F, 0.0f, da.data(), F);
    for (int64_t r = 0; r < n; ++r) {
      const float *ar = a.data() + r * F;
      float *dar = da.data() + r * F;
      double dot = 0.0;
      for (int64_t f = 0; f < F; ++f)
        dot += static_cast<double>(ar[f]) * dar[f];
      float w = weights[slots[r]];
      dweights[slots[r]] = static_cast<float>(dot);
      for (int64_t f = 0; f < F; ++f)
        dar[f] *= w;
      // dW2 needs w_j dy; scale the gathered copy now that da' is done.
      float *dyr = dye.data() + r * H;
      const float *exact = rounding.enabled() ? dyWeighted.data() + r * H : dyr;
      for (int64_t i = 0; i < H; ++i)
        dyr[i] = exact[i] * w;
    }
    rounding.activation(dye.data(), n, H, gradFormat, e,
                        Role::WeightedOutputGrad);
    // dW2[e] = (w dy)^T a.
    detail::gemm(/*transA=*/true, /*transB=*/false, H, F, n, 1.0f, dye.data(),
                 H, a.data(), F, 0.0f, dw2e, F);

    // du = da g silu'(u), dg = da silu(u), written over u and g.
    swigluBackward(da.data(), u.data(), g.data(), u.data(), g.data(), n * F);
    rounding.activation(u.data(), n, F, gradFormat, e, Role::UpGrad);
    rounding.activation(g.data(), n, F, gradFormat, e, Role::GateGrad);

    // dx_e = du W1[e] + dg W3[e]; dW1[e] = du^T x; dW3[e] = dg^T x.
    detail::gemm(/*transA=*/false, /*transB=*/false, n, H, F, 1.0f, u.data(), F,
                 w1e, H, 0.0f, dxe.data(), H);
    detail::gemm(/*transA=*/false, /*transB=*/false, n, H, F, 1.0f, g.data(), F,
                 w3e, H, 1.0f, dxe.data(), H);
    detail::gemm(/*transA=*/true, /*transB=*/false, F, H, n, 1.0f, u.data(), F,
                 xe.data(), H, 0.0f, dw1e, H);
    detail::gemm(/*transA=*/true, /*transB=*/false, F, H, n, 1.0f, g.data(), F,
                 xe.data(), H, 0.0f, dw3e, H);
    if (bf16Rows)
      roundToBf16(dxe.data(), n * H);
    for (int64_t r = 0; r < n; ++r) {
      float *dxr = dx + (slots[r] / topK) * H;
      const float *src = dxe.data() + r * H;
      for (int64_t i = 0; i < H; ++i)
        dxr[i] += src[i];
    }
  }
}

} // namespace moe::rt::cpu
