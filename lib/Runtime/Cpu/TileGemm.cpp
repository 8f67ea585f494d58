//===- TileGemm.cpp - Small GEMMs on cache-resident tiles -----------------===//
//
// Attention multiplies tiles of 64 rows by 64 keys by one head's width
// (32-128): an sgemm call per tile spends more on packing and dispatch than
// on the arithmetic (attention ran at 2-8 GFLOP/s through OpenBLAS). This
// kernel keeps a block of 4 rows by 64 (or 32, or 16) columns of C in
// vector registers while it walks the reduction, broadcasting one element
// of A against a row of B, which the tiles' layouts (B row-major,
// contiguous along C's columns) make a unit-stride load.
//
// Written with GCC's generic 16-float vectors and compiled for AVX-512F,
// AVX2 and the baseline, the best the CPU supports picked at load time:
// one AVX-512 register per vector there, two or four on the others. Each
// element is one sum over k in increasing order, so results are bitwise
// reproducible on a machine (the AVX-512 clone fuses multiply-adds, the
// others do not).
//
//===----------------------------------------------------------------------===//

#include "KernelUtils.h"

#include <algorithm>
#include <cstring>
#include <vector>

// The vector helpers below are always inlined into one clone, so no call
// passes a vector across the ABI that GCC warns may differ between targets.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace moe::rt::cpu::detail {
namespace {

using Vec = float __attribute__((vector_size(64)));
constexpr int64_t kVecFloats = 16;
constexpr int64_t kRows = 4;

__attribute__((always_inline)) inline Vec loadVec(const float *p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

__attribute__((always_inline)) inline void storeVec(float *p, Vec v) {
  std::memcpy(p, &v, sizeof(v));
}

/// C[r][col, col + 16 * kVecs) for kRows rows at once.
template <int kVecs>
__attribute__((always_inline)) inline void
rowBlock(const float *const *a, int64_t K, const float *B, int64_t ldb,
         int64_t col, float alpha, float *const *c, bool accumulate) {
  Vec acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v)
      acc[r][v] = Vec{} + 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float *bRow = B + k * ldb + col;
    Vec b[kVecs];
    for (int v = 0; v < kVecs; ++v)
      b[v] = loadVec(bRow + v * kVecFloats);
    for (int r = 0; r < kRows; ++r) {
      float x = a[r][k];
      for (int v = 0; v < kVecs; ++v)
        acc[r][v] += x * b[v];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) {
      float *out = c[r] + col + v * kVecFloats;
      Vec value = alpha * acc[r][v];
      storeVec(out, accumulate ? loadVec(out) + value : value);
    }
}

} // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) void
tileGemm(const float *A, int64_t lda, int64_t rows, int64_t K, const float *B,
         int64_t ldb, int64_t n, float alpha, float *C, int64_t ldc,
         bool accumulate) {
  if (rows <= 0 || n <= 0)
    return;
  // Missing rows of the last block read zeros and write to a sink.
  std::vector<float> zeros, sink;
  if (rows % kRows != 0) {
    zeros.assign(std::max<int64_t>(K, 1), 0.0f);
    sink.resize(n);
  }
  int64_t vecEnd = n / kVecFloats * kVecFloats;
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    int64_t live = std::min(kRows, rows - r0);
    const float *a[kRows];
    float *c[kRows];
    for (int64_t r = 0; r < kRows; ++r) {
      a[r] = r < live ? A + (r0 + r) * lda : zeros.data();
      c[r] = r < live ? C + (r0 + r) * ldc : sink.data();
    }
    int64_t col = 0;
    for (; col + 4 * kVecFloats <= vecEnd; col += 4 * kVecFloats)
      rowBlock<4>(a, K, B, ldb, col, alpha, c, accumulate);
    for (; col + 2 * kVecFloats <= vecEnd; col += 2 * kVecFloats)
      rowBlock<2>(a, K, B, ldb, col, alpha, c, accumulate);
    for (; col < vecEnd; col += kVecFloats)
      rowBlock<1>(a, K, B, ldb, col, alpha, c, accumulate);
    // Columns past the last whole vector (head widths that are not a
    // multiple of 16), one sum at a time in the same order.
    for (; col < n; ++col)
      for (int64_t r = 0; r < live; ++r) {
        float sum = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          sum += a[r][k] * B[k * ldb + col];
        c[r][col] = accumulate ? c[r][col] + alpha * sum : alpha * sum;
      }
  }
}

} // namespace moe::rt::cpu::detail
