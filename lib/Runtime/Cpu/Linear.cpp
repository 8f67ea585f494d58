//===- Linear.cpp - Linear layers and the shared sgemm wrapper ------------===//
//
// y = x W^T with W in nn.Linear's [out, in] layout, and its two VJPs. All three
// are single OpenBLAS sgemm calls; OpenBLAS partitions the output, never the
// reduction, across its threads, so results do not depend on thread timing.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"

#include <algorithm>
#include <cblas.h>

namespace moe::rt::cpu {

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
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

void setNumThreads(int threads) { openblas_set_num_threads(threads); }

int numThreads() { return openblas_get_num_threads(); }

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

void linearBackwardWeight(const float *dy, const float *x, float *dw, int64_t T,
                          int64_t K, int64_t N) {
  detail::gemm(/*transA=*/true, /*transB=*/false, N, K, T, 1.0f, dy, N, x, K,
               0.0f, dw, K);
}

} // namespace moe::rt::cpu
