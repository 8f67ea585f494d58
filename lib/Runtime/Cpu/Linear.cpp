//===- Linear.cpp - Linear layers and the shared sgemm wrapper ------------===//
//
// y = x W^T with W in nn.Linear's [out, in] layout, and its two VJPs. All three
// go through detail::gemm, which cuts the output (never the reduction) into
// one block per thread of the kernels' pool and runs one single-threaded
// OpenBLAS sgemm per block, so results do not depend on thread timing.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cblas.h>

namespace moe::rt::cpu {

namespace {
/// Below this many flops a GEMM runs on one thread: a region costs a few
/// microseconds, about what 2^22 flops take on one core.
constexpr double kParallelGemmFlops = double(1 << 22);
/// Shares of a split GEMM start on multiples of this many rows or columns,
/// so every share but the last is whole register tiles of OpenBLAS's kernels.
constexpr int64_t kShareAlign = 16;
/// A GEMM with at least this many rows per thread is cut by rows.
constexpr int64_t kRowsPerShare = 64;

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
           float alpha, const float *A, int64_t lda, const float *B,
           int64_t ldb, float beta, float *C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}
} // namespace

void detail::gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) {
    // Reference BLAS returns early here when beta == 1 but not every build
    // scales C otherwise; do it ourselves so an empty sum is exactly beta*C.
    for (int64_t i = 0; i < M; ++i) {
      float *row = C + i * ldc;
      if (beta == 0.0f)
        std::fill(row, row + N, 0.0f);
      else if (beta != 1.0f)
        for (int64_t j = 0; j < N; ++j)
          row[j] *= beta;
    }
    return;
  }
  int64_t threads = availableThreads();
  double flops = 2.0 * static_cast<double>(M) * N * K;
  if (threads == 1 || flops < kParallelGemmFlops) {
    sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Each thread computes a block of C's rows (or columns, when C has too
  // few rows: blocks of columns ran at half the speed of blocks of rows on
  // the same shapes) over the whole reduction, so every element is one
  // sgemm's dot product and no sum depends on the split's timing.
  bool byRows = M >= kRowsPerShare * threads || M >= N;
  int64_t extent = byRows ? M : N;
  int64_t parts = std::min(threads, (extent + kShareAlign - 1) / kShareAlign);
  parallelFor(parts, [&](int64_t part, int) {
    Share share = shareOf(extent, parts, part, kShareAlign);
    int64_t n = share.end - share.begin;
    if (n <= 0)
      return;
    if (byRows)
      sgemm(transA, transB, n, N, K, alpha,
            A + (transA ? share.begin : share.begin * lda), lda, B, ldb, beta,
            C + share.begin * ldc, ldc);
    else
      sgemm(transA, transB, M, n, K, alpha, A, lda,
            B + (transB ? share.begin * ldb : share.begin), ldb, beta,
            C + share.begin, ldc);
  });
}

void linearForward(const float *x, const float *w, float *y, int64_t T,
                   int64_t K, int64_t N) {
  detail::gemm(/*transA=*/false, /*transB=*/true, T, N, K, 1.0f, x, K, w, K,
               0.0f, y, N);
}

void linearBackwardInput(const float *dy, const float *w, float *dx, int64_t T,
                         int64_t K, int64_t N) {
  detail::gemm(/*transA=*/false, /*transB=*/false, T, K, N, 1.0f, dy, N, w, K,
               0.0f, dx, K);
}

namespace {
/// out = in, rows split over the threads; nothing when they are one buffer.
void copyAddend(const float *in, float *out, int64_t rows, int64_t width) {
  if (in == out)
    return;
  detail::forEachShare(
      rows, detail::rowGrain(width), [&](int64_t begin, int64_t end) {
        std::copy(in + begin * width, in + end * width, out + begin * width);
      });
}
} // namespace

void linearForwardAccumulate(const float *x, const float *w,
                             const float *addend, float *y, int64_t T,
                             int64_t K, int64_t N) {
  copyAddend(addend, y, T, N);
  detail::gemm(/*transA=*/false, /*transB=*/true, T, N, K, 1.0f, x, K, w, K,
               1.0f, y, N);
}

void linearBackwardInputAccumulate(const float *dy, const float *w,
                                   const float *addend, float *dx, int64_t T,
                                   int64_t K, int64_t N) {
  copyAddend(addend, dx, T, K);
  detail::gemm(/*transA=*/false, /*transB=*/false, T, K, N, 1.0f, dy, N, w, K,
               1.0f, dx, K);
}

void linearBackwardWeight(const float *dy, const float *x, float *dw, int64_t T,
                          int64_t K, int64_t N) {
  detail::gemm(/*transA=*/true, /*transB=*/false, N, K, T, 1.0f, dy, N, x, K,
               0.0f, dw, K);
}

} // namespace moe::rt::cpu
