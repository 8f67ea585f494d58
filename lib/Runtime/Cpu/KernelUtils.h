//===- KernelUtils.h - Helpers shared by the CPU kernels --------*- C++ -*-===//
//
// Private to lib/Runtime/Cpu: the sgemm wrapper, attention's tile GEMM, the
// vectorised exp and row reductions, cross-entropy's rule for ignored
// targets and its gradient row, and the top-k selection rule that the router,
// its backward and the load-balancing loss must all apply identically.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CPU_KERNELUTILS_H
#define MOE_LIB_RUNTIME_CPU_KERNELUTILS_H

#include "moe/Runtime/Cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace moe::rt::cpu::detail {

/// Row-major C[M, N] = alpha * op(A) op(B) + beta * C through cblas_sgemm,
/// where op(X) is X or X^T as transA/transB say. Unlike some BLAS builds it
/// always honours beta when the reduction length K is 0 (C = beta * C), and
/// it does nothing when M or N is 0.
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          float alpha, const float *A, int64_t lda, const float *B,
          int64_t ldb, float beta, float *C, int64_t ldc);

/// C[r, 0..n) = alpha * sum_k A[r, k] B[k, 0..n) for r < rows (or += with
/// `accumulate`), all row-major with leading dimensions lda, ldb, ldc: the
/// small GEMMs of attention's tiles, vectorised (TileGemm.cpp). Each element
/// sums over k in increasing order.
void tileGemm(const float *A, int64_t lda, int64_t rows, int64_t K,
              const float *B, int64_t ldb, int64_t n, float alpha, float *C,
              int64_t ldc, bool accumulate);

/// out[j] = exp(in[j] - shift) for j in [0, n), vectorised (VectorMath.cpp:
/// below 1e-7 relative error; in and out may be the same array).
void expShifted(const float *in, float *out, int64_t n, float shift);

/// The largest of x[0, n) (-infinity when n is 0), vectorised.
float rowMax(const float *x, int64_t n);

/// expShifted, returning the sum of the outputs (in double, over
/// interleaved partial sums combined in a fixed order).
double expShiftedSum(const float *in, float *out, int64_t n, float shift);

/// Whether cross-entropy counts a row with this target: targets outside
/// [0, V) are ignored, negative ones by definition (HF's -100), ids >= V
/// because there is no logit to read for them. Shared by the plain and the
/// fused (LM head) cross-entropy, which must ignore the same rows.
inline bool isCounted(int32_t target, int64_t V) {
  return target >= 0 && target < V;
}

/// log sum_v exp(x[v]), max-subtracted; the sum is accumulated in double.
/// The cross-entropy's and the router z-loss's.
inline double logSumExp(const float *x, int64_t V) {
  float m = *std::max_element(x, x + V);
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v)
    sum += std::exp(static_cast<double>(x[v]) - m);
  return static_cast<double>(m) + std::log(sum);
}

/// g[v] = coef * exp(x[v] - lse) over n logits, in double, rounded once: a
/// counted row of the mean cross-entropy's logits gradient before its
/// target's -coef. Shared by the plain and the fused cross-entropy, so their
/// gradients differ by nothing but the lse they are given. g may be x.
inline void scaledSoftmax(const float *x, float *g, int64_t n, double lse,
                          double coef) {
  for (int64_t v = 0; v < n; ++v)
    g[v] = static_cast<float>(coef * std::exp(static_cast<double>(x[v]) - lse));
}

/// Writes the ids of the topK largest of p[0, E) into idx in descending order
/// of p; equal values go to the lower id first. This is the one selection
/// rule of docs/semantics.md, recomputed by every kernel that needs it so that
/// they can never disagree. Requires topK <= E.
void selectTopK(const float *p, int64_t E, int64_t topK, int32_t *idx);

/// The working rows of selectRouted, allocated once per kernel call.
struct RoutingScratch {
  RoutingScratch(int64_t E, const RoutingRule &rule)
      : choice(E), groupScore(rule.groups), bestGroups(rule.topGroups) {}
  std::vector<float> choice, groupScore;
  std::vector<int32_t> bestGroups;
};

/// The router's selection (docs/semantics.md, "Router"): selectTopK of
/// probs + bias among the experts of the rule's best groups. Without a
/// bias and groups, exactly selectTopK of probs.
void selectRouted(const float *probs, int64_t E, int64_t topK,
                  const RoutingRule &rule, int32_t *idx,
                  RoutingScratch &scratch);

/// The per-expert capacity C = ceil(cf * T * topK / E) of docs/semantics.md,
/// or -1 (unbounded) when capacityFactor <= 0.
int64_t expertCapacity(float capacityFactor, int64_t T, int64_t E,
                       int64_t topK);

} // namespace moe::rt::cpu::detail

#endif // MOE_LIB_RUNTIME_CPU_KERNELUTILS_H
