//===- Experts.cpp - SwiGLU experts over routed tokens --------------------===//
//
// Token-to-expert assignments are grouped by expert with a stable counting
// sort over the flat slots t * topK + j, so each expert's rows are in token
// order. Each expert then runs as dense sgemms over its gathered rows (the
// experts spread over the kernels' threads, ThreadPool.h), into rows of its
// own; then each token adds its rows in expert order, which is what
// scattering back expert by expert (HF's index_add_ order) gives. Every sum
// has a fixed order, so the outputs are bitwise reproducible.
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

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace moe::rt::cpu {

namespace {
/// Assignments grouped by expert: slots[offsets[e] .. offsets[e+1]) are the
/// flat slot ids t * topK + j routed to expert e, ascending.
struct ExpertGroups {
  std::vector<int64_t> offsets;
  std::vector<int64_t> slots;

  ExpertGroups(const int32_t *indices, int64_t T, int64_t E, int64_t topK)
      : offsets(E + 1, 0) {
    int64_t numSlots = T * topK;
    // Ids outside [0, E) (capacity drops are -1) take part in nothing.
    auto valid = [&](int32_t e) { return e >= 0 && e < E; };
    for (int64_t s = 0; s < numSlots; ++s)
      if (valid(indices[s]))
        ++offsets[indices[s] + 1];
    for (int64_t e = 0; e < E; ++e)
      offsets[e + 1] += offsets[e];
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
void gatherRows(const float *src, const int64_t *slots, int64_t n, int64_t topK,
                int64_t width, float *dst) {
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
                      fp8->history +
                          (e * kFp8ExpertRoles + static_cast<int64_t>(role)) *
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

/// Uninitialised floats: the kernels write every scratch element before
/// reading it, and zeroing megabytes per call cost as much as the
/// small experts' GEMMs.
class Buffer {
public:
  explicit Buffer(int64_t n = 0) : data_(n > 0 ? new float[n] : nullptr) {}
  float *data() const { return data_.get(); }

private:
  std::unique_ptr<float[]> data_;
};

/// One worker's buffers, sized for the largest expert.
struct ExpertScratch {
  Buffer xe, dye, u, g, a, da;
  std::vector<float> w1q, w3q, w2q, dyWeighted;

  ExpertScratch(int64_t rows, int64_t H, int64_t F, bool backward)
      : xe(rows * H), dye(backward ? rows * H : 0), u(rows * F), g(rows * F),
        a(backward ? rows * F : 0), da(backward ? rows * F : 0) {}
};

/// Runs perExpert(e, scratch) for every expert with rows, T tokens in all.
/// An expert with more than a thread's share of the tokens (routing is
/// often that skewed early in training) runs alone, its GEMMs and row loops
/// cut over the threads; the others are the pool's tasks, each on one thread
/// with its GEMMs whole, largest first so that no thread is left with a
/// large one at the end. Each expert writes only its own rows and weights'
/// gradients, and which way an expert runs depends only on the routing and
/// the thread count, so the results never depend on timing.
///
/// The scratch never holds more than T rows at once, whatever the thread
/// count: one expert's alone, then at most T / threads rows per thread
/// (expertsWorkspaceBytes counts T).
template <typename PerExpert>
void forEachExpert(const ExpertGroups &groups, int64_t T, int64_t E, int64_t H,
                   int64_t F, bool backward, const PerExpert &perExpert) {
  int threads = detail::availableThreads();
  std::vector<int64_t> alone, tasks;
  int64_t aloneRows = 0, taskRows = 0;
  for (int64_t e = 0; e < E; ++e) {
    int64_t rows = groups.rows(e);
    if (rows == 0)
      continue;
    if (threads > 1 && rows * threads <= T) {
      tasks.push_back(e);
      taskRows = std::max(taskRows, rows);
    } else {
      alone.push_back(e);
      aloneRows = std::max(aloneRows, rows);
    }
  }
  if (!alone.empty()) {
    ExpertScratch scratch(aloneRows, H, F, backward);
    for (int64_t e : alone)
      perExpert(e, scratch);
  }
  if (tasks.empty())
    return;
  std::stable_sort(tasks.begin(), tasks.end(), [&](int64_t a, int64_t b) {
    return groups.rows(a) > groups.rows(b);
  });
  int workers = std::min<int64_t>(threads, tasks.size());
  std::vector<ExpertScratch> scratch;
  scratch.reserve(workers);
  for (int w = 0; w < workers; ++w)
    scratch.emplace_back(taskRows, H, F, backward);
  detail::parallelFor(static_cast<int64_t>(tasks.size()),
                      [&](int64_t task, int worker) {
                        perExpert(tasks[task], scratch[worker]);
                      });
}

/// fn(begin, end) over shares of an expert's rows [0, n), in parallel
/// where threads are free (inside an expert task they are not).
template <typename Function> void forRowShares(int64_t n, const Function &fn) {
  detail::forEachShare(n, /*grain=*/32, fn);
}

/// out[t, :] = sum over token t's routed slots, in expert order, of
/// scale(slot) * rows[position of the slot, :], where the rows are in
/// grouped (expert, then token) order: what adding each expert's rows into
/// a zeroed out, expert by expert, gives, bit for bit. Tokens are split over
/// the threads.
template <typename Scale>
void combineInExpertOrder(const ExpertGroups &groups, const int32_t *indices,
                          const float *rows, int64_t T, int64_t H, int64_t topK,
                          const Scale &scale, float *out) {
  std::vector<int64_t> position(T * topK, -1);
  for (int64_t p = 0; p < static_cast<int64_t>(groups.slots.size()); ++p)
    position[groups.slots[p]] = p;
  detail::forEachShare(T, detail::rowGrain(H), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order(topK);
    for (int64_t t = begin; t < end; ++t) {
      float *outRow = out + t * H;
      std::fill(outRow, outRow + H, 0.0f);
      int64_t count = 0;
      for (int64_t j = 0; j < topK; ++j)
        if (position[t * topK + j] >= 0)
          order[count++] = t * topK + j;
      std::stable_sort(
          order.begin(), order.begin() + count,
          [&](int64_t a, int64_t b) { return indices[a] < indices[b]; });
      for (int64_t c = 0; c < count; ++c) {
        int64_t slot = order[c];
        float w = scale(slot);
        const float *row = rows + position[slot] * H;
        for (int64_t i = 0; i < H; ++i)
          outRow[i] += w * row[i];
      }
    }
  });
}
} // namespace

void expertsForward(const float *x, const float *weights,
                    const int32_t *indices, const float *w1, const float *w3,
                    const float *w2, float *y, int64_t T, int64_t H, int64_t F,
                    int64_t E, int64_t topK, const Fp8Gemms *fp8, bool bf16Rows,
                    float *hidden) {
  ExpertGroups groups(indices, T, E, topK);
  if (hidden)
    for (int64_t s = 0; s < T * topK; ++s)
      if (indices[s] < 0 || indices[s] >= E)
        std::fill(hidden + s * 2 * F, hidden + (s + 1) * 2 * F, 0.0f);
  // Every expert's output rows, in grouped order.
  Buffer outputs(groups.slots.size() * H);
  Fp8Rounding rounding(fp8);
  using Role = Fp8ExpertRole;
  forEachExpert(
      groups, T, E, H, F, /*backward=*/false,
      [&](int64_t e, ExpertScratch &scratch) {
        int64_t n = groups.rows(e);
        const int64_t *slots = groups.slots.data() + groups.begin(e);
        float *xe = scratch.xe.data(), *u = scratch.u.data(),
              *g = scratch.g.data();
        forRowShares(n, [&](int64_t r0, int64_t r1) {
          gatherRows(x, slots + r0, r1 - r0, topK, H, xe + r0 * H);
        });
        rounding.activation(xe, n, H, Fp8Format::E4M3, e, Role::Input);
        upProjections(
            xe, rounding.weight(w1 + e * F * H, F, H, scratch.w1q, e, Role::W1),
            rounding.weight(w3 + e * F * H, F, H, scratch.w3q, e, Role::W3), u,
            g, n, H, F);
        // a = silu(u) * g, in place of u, once u is saved.
        forRowShares(n, [&](int64_t r0, int64_t r1) {
          if (hidden)
            saveHidden(u + r0 * F, g + r0 * F, slots + r0, r1 - r0, F, hidden);
          swigluForward(u + r0 * F, g + r0 * F, u + r0 * F, (r1 - r0) * F);
        });
        rounding.activation(u, n, F, Fp8Format::E4M3, e, Role::Activation);
        float *ze = outputs.data() + groups.begin(e) * H;
        detail::gemm(
            /*transA=*/false, /*transB=*/true, n, H, F, 1.0f, u, F,
            rounding.weight(w2 + e * H * F, H, F, scratch.w2q, e, Role::W2), F,
            0.0f, ze, H);
        if (bf16Rows)
          forRowShares(n, [&](int64_t r0, int64_t r1) {
            roundToBf16(ze + r0 * H, (r1 - r0) * H);
          });
      });
  combineInExpertOrder(
      groups, indices, outputs.data(), T, H, topK,
      [&](int64_t slot) { return weights[slot]; }, y);
}

void expertsBackward(const float *dy, const float *x, const float *weights,
                     const int32_t *indices, const float *w1, const float *w3,
                     const float *w2, float *dx, float *dweights, float *dw1,
                     float *dw3, float *dw2, int64_t T, int64_t H, int64_t F,
                     int64_t E, int64_t topK, const Fp8Gemms *fp8,
                     bool bf16Rows, const float *hidden) {
  // Dropped slots keep dweights = 0 (docs/semantics.md, Router backward).
  std::fill(dweights, dweights + T * topK, 0.0f);
  ExpertGroups groups(indices, T, E, topK);
  for (int64_t e = 0; e < E; ++e)
    if (groups.rows(e) == 0) {
      std::fill(dw1 + e * F * H, dw1 + (e + 1) * F * H, 0.0f);
      std::fill(dw3 + e * F * H, dw3 + (e + 1) * F * H, 0.0f);
      std::fill(dw2 + e * H * F, dw2 + (e + 1) * H * F, 0.0f);
    }
  // Every expert's input-gradient rows, in grouped order.
  Buffer inputGrads(groups.slots.size() * H);
  Fp8Rounding rounding(fp8);
  Fp8Format gradFormat = rounding.gradientFormat();
  using Role = Fp8ExpertRole;
  forEachExpert(
      groups, T, E, H, F, /*backward=*/true,
      [&](int64_t e, ExpertScratch &scratch) {
        float *dw1e = dw1 + e * F * H, *dw3e = dw3 + e * F * H;
        float *dw2e = dw2 + e * H * F;
        int64_t n = groups.rows(e);
        const float *w1e =
            rounding.weight(w1 + e * F * H, F, H, scratch.w1q, e, Role::W1);
        const float *w3e =
            rounding.weight(w3 + e * F * H, F, H, scratch.w3q, e, Role::W3);
        const float *w2e =
            rounding.weight(w2 + e * H * F, H, F, scratch.w2q, e, Role::W2);
        const int64_t *slots = groups.slots.data() + groups.begin(e);
        float *xe = scratch.xe.data(), *dye = scratch.dye.data();
        float *u = scratch.u.data(), *g = scratch.g.data();
        float *a = scratch.a.data(), *da = scratch.da.data();
        forRowShares(n, [&](int64_t r0, int64_t r1) {
          gatherRows(x, slots + r0, r1 - r0, topK, H, xe + r0 * H);
          gatherRows(dy, slots + r0, r1 - r0, topK, H, dye + r0 * H);
          if (hidden)
            loadHidden(hidden, slots + r0, r1 - r0, F, u + r0 * F, g + r0 * F);
        });
        rounding.activation(xe, n, H, Fp8Format::E4M3, e, Role::Input);
        if (!hidden)
          upProjections(xe, w1e, w3e, u, g, n, H, F);
        forRowShares(n, [&](int64_t r0, int64_t r1) {
          swigluForward(u + r0 * F, g + r0 * F, a + r0 * F, (r1 - r0) * F);
        });
        rounding.activation(a, n, F, Fp8Format::E4M3, e, Role::Activation);
        // The unweighted dy for da', then w dy for dW2: each rounded as the
        // GEMM reading it sees it.
        if (rounding.enabled()) {
          scratch.dyWeighted.assign(dye, dye + n * H);
          rounding.activation(dye, n, H, gradFormat, e, Role::OutputGrad);
        }

        // da' = dy W2[e] (unweighted); dw_j = a . da'; da = w_j da'.
        detail::gemm(/*transA=*/false, /*transB=*/false, n, F, H, 1.0f, dye, H,
                     w2e, F, 0.0f, da, F);
        forRowShares(n, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float *ar = a + r * F;
            float *dar = da + r * F;
            double dot = 0.0;
            for (int64_t f = 0; f < F; ++f)
              dot += static_cast<double>(ar[f]) * dar[f];
            float w = weights[slots[r]];
            dweights[slots[r]] = static_cast<float>(dot);
            for (int64_t f = 0; f < F; ++f)
              dar[f] *= w;
            // dW2 needs w_j dy; scale the gathered copy now that da' is
            // done.
            float *dyr = dye + r * H;
            const float *exact =
                rounding.enabled() ? scratch.dyWeighted.data() + r * H : dyr;
            for (int64_t i = 0; i < H; ++i)
              dyr[i] = exact[i] * w;
          }
        });
        rounding.activation(dye, n, H, gradFormat, e, Role::WeightedOutputGrad);
        // dW2[e] = (w dy)^T a.
        detail::gemm(/*transA=*/true, /*transB=*/false, H, F, n, 1.0f, dye, H,
                     a, F, 0.0f, dw2e, F);

        // du = da g silu'(u), dg = da silu(u), written over u and g.
        forRowShares(n, [&](int64_t r0, int64_t r1) {
          swigluBackward(da + r0 * F, u + r0 * F, g + r0 * F, u + r0 * F,
                         g + r0 * F, (r1 - r0) * F);
        });
        rounding.activation(u, n, F, gradFormat, e, Role::UpGrad);
        rounding.activation(g, n, F, gradFormat, e, Role::GateGrad);

        // dx_e = du W1[e] + dg W3[e]; dW1[e] = du^T x; dW3[e] = dg^T x.
        float *dxe = inputGrads.data() + groups.begin(e) * H;
        detail::gemm(/*transA=*/false, /*transB=*/false, n, H, F, 1.0f, u, F,
                     w1e, H, 0.0f, dxe, H);
        detail::gemm(/*transA=*/false, /*transB=*/false, n, H, F, 1.0f, g, F,
                     w3e, H, 1.0f, dxe, H);
        detail::gemm(/*transA=*/true, /*transB=*/false, F, H, n, 1.0f, u, F, xe,
                     H, 0.0f, dw1e, H);
        detail::gemm(/*transA=*/true, /*transB=*/false, F, H, n, 1.0f, g, F, xe,
                     H, 0.0f, dw3e, H);
        if (bf16Rows)
          forRowShares(n, [&](int64_t r0, int64_t r1) {
            roundToBf16(dxe + r0 * H, (r1 - r0) * H);
          });
      });
  combineInExpertOrder(
      groups, indices, inputGrads.data(), T, H, topK,
      [](int64_t) { return 1.0f; }, dx);
}

} // namespace moe::rt::cpu
