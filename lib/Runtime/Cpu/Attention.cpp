//===- Attention.cpp - Causal grouped-query attention ---------------------===//
//
// Exact softmax attention computed one block of query rows at a time, as in
// FlashAttention's outer loop: for rows [i0, i0 + bq) of one (batch, head),
// the scores against keys [0, i0 + bq) are one sgemm into an O(bq * S)
// scratch, each row is normalised with its own log-sum-exp, and the output is
// a second sgemm. Only lse ([B, heads, S]) is kept; the backward recomputes
// P = exp(s - lse) block by block, so no S x S matrix is ever stored.
//
// Every sum runs in a fixed order (rows in order, heads of a group in order),
// so results are bitwise reproducible.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace moe::rt::cpu {

namespace {
constexpr int64_t kBlockRows = kAttentionBlockRows;

/// Strided views of one (batch, query head) and its key/value head.
struct HeadView {
  int64_t ldq, ldkv;
  int64_t qOffset, kvOffset;

  HeadView(int64_t b, int64_t h, int64_t S, int64_t heads, int64_t kvHeads,
           int64_t headDim) {
    int64_t group = heads / kvHeads;
    int64_t g = h / group;
    ldq = heads * headDim;
    ldkv = kvHeads * headDim;
    qOffset = b * S * ldq + h * headDim;
    kvOffset = b * S * ldkv + g * headDim;
  }
};

/// scores[bq, n] = scale * q[i0 .. i0+bq) k[0 .. n)^T, n = i0 + bq.
void blockScores(const float *q, const float *k, const HeadView &view,
                 int64_t i0, int64_t bq, int64_t headDim, float scale,
                 float *scores) {
  int64_t n = i0 + bq;
  detail::gemm(/*transA=*/false, /*transB=*/true, bq, n, headDim, scale,
               q + view.qOffset + i0 * view.ldq, view.ldq, k + view.kvOffset,
               view.ldkv, 0.0f, scores, n);
}

/// Turns row r (query i0 + r) of a score block into probabilities
/// exp(s - lse), zero above the diagonal.
void rowProbabilities(float *row, int64_t i, int64_t n, float lse) {
  detail::expShifted(row, row, i + 1, lse);
  std::fill(row + i + 1, row + n, 0.0f);
}
} // namespace

void attentionForward(const float *q, const float *k, const float *v,
                      float *out, float *lse, int64_t B, int64_t S,
                      int64_t heads, int64_t kvHeads, int64_t headDim) {
  if (B <= 0 || S <= 0 || heads <= 0 || headDim <= 0)
    return;
  float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  std::vector<float> scores(std::min(kBlockRows, S) * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      HeadView view(b, h, S, heads, kvHeads, headDim);
      float *lseRow = lse + (b * heads + h) * S;
      for (int64_t i0 = 0; i0 < S; i0 += kBlockRows) {
        int64_t bq = std::min(kBlockRows, S - i0);
        int64_t n = i0 + bq;
        blockScores(q, k, view, i0, bq, headDim, scale, scores.data());
        for (int64_t r = 0; r < bq; ++r) {
          int64_t i = i0 + r;
          float *row = scores.data() + r * n;
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j <= i; ++j)
            m = std::max(m, row[j]);
          // exp(s - m), summed in order; P = exp(s - m) / sum, which is
          // exp(s - lse) up to rounding (the backward recomputes that).
          detail::expShifted(row, row, i + 1, m);
          double sum = 0.0;
          for (int64_t j = 0; j <= i; ++j)
            sum += row[j];
          lseRow[i] = m + static_cast<float>(std::log(sum));
          float inverse = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j <= i; ++j)
            row[j] *= inverse;
          std::fill(row + i + 1, row + n, 0.0f);
        }
        detail::gemm(/*transA=*/false, /*transB=*/false, bq, headDim, n, 1.0f,
                     scores.data(), n, v + view.kvOffset, view.ldkv, 0.0f,
                     out + view.qOffset + i0 * view.ldq, view.ldq);
      }
    }
}

void attentionBackward(const float *dout, const float *q, const float *k,
                       const float *v, const float *out, const float *lse,
                       float *dq, float *dk, float *dv, int64_t B, int64_t S,
                       int64_t heads, int64_t kvHeads, int64_t headDim) {
  int64_t kvSize = B * S * kvHeads * headDim;
  std::fill(dk, dk + kvSize, 0.0f);
  std::fill(dv, dv + kvSize, 0.0f);
  if (B <= 0 || S <= 0 || heads <= 0 || headDim <= 0)
    return;
  float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  int64_t blockCap = std::min(kBlockRows, S);
  std::vector<float> probs(blockCap * S), dprobs(blockCap * S), delta(blockCap);
  // Query heads are visited in order, so the heads of a group add into their
  // shared dk/dv in a fixed order.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      HeadView view(b, h, S, heads, kvHeads, headDim);
      const float *lseRow = lse + (b * heads + h) * S;
      const float *qh = q + view.qOffset;
      const float *doh = dout + view.qOffset;
      const float *oh = out + view.qOffset;
      for (int64_t i0 = 0; i0 < S; i0 += kBlockRows) {
        int64_t bq = std::min(kBlockRows, S - i0);
        int64_t n = i0 + bq;
        blockScores(q, k, view, i0, bq, headDim, scale, probs.data());
        for (int64_t r = 0; r < bq; ++r) {
          int64_t i = i0 + r;
          rowProbabilities(probs.data() + r * n, i, n, lseRow[i]);
          // D[i] = do[i] . o[i] (= sum_j P[i,j] dP[i,j], the softmax
          // Jacobian's rank-one term).
          double d = 0.0;
          for (int64_t e = 0; e < headDim; ++e)
            d += static_cast<double>(doh[i * view.ldq + e]) *
                 oh[i * view.ldq + e];
          delta[r] = static_cast<float>(d);
        }
        // dv[0, n) += P^T do.
        detail::gemm(/*transA=*/true, /*transB=*/false, n, headDim, bq, 1.0f,
                     probs.data(), n, doh + i0 * view.ldq, view.ldq, 1.0f,
                     dv + view.kvOffset, view.ldkv);
        // dP = do v^T, then dS = P (dP - D) in place.
        detail::gemm(/*transA=*/false, /*transB=*/true, bq, n, headDim, 1.0f,
                     doh + i0 * view.ldq, view.ldq, v + view.kvOffset,
                     view.ldkv, 0.0f, dprobs.data(), n);
        for (int64_t r = 0; r < bq; ++r) {
          const float *p = probs.data() + r * n;
          float *ds = dprobs.data() + r * n;
          for (int64_t j = 0; j < n; ++j)
            ds[j] = p[j] * (ds[j] - delta[r]);
        }
        // dq = c dS k (written), dk[0, n) += c dS^T q.
        detail::gemm(/*transA=*/false, /*transB=*/false, bq, headDim, n, scale,
                     dprobs.data(), n, k + view.kvOffset, view.ldkv, 0.0f,
                     dq + view.qOffset + i0 * view.ldq, view.ldq);
        detail::gemm(/*transA=*/true, /*transB=*/false, n, headDim, bq, scale,
                     dprobs.data(), n, qh + i0 * view.ldq, view.ldq, 1.0f,
                     dk + view.kvOffset, view.ldkv);
      }
    }
}

} // namespace moe::rt::cpu
