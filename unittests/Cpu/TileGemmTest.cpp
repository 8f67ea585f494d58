//===- TileGemmTest.cpp - Attention's tile GEMM ---------------------------===//
//
// detail::tileGemm against a double-precision loop on every shape class it
// handles differently: row counts that are not a multiple of its 4-row
// blocks, widths below, at and past its 64- and 16-column vector blocks
// (head widths that are not a multiple of 16 take the scalar tail), strided
// operands, and both writing and accumulating.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/Cpu/KernelUtils.h"
#include "TestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

/// The worst case of K fp32 multiply-adds in any order, with or without
/// fusing, scaled and added to `prior`: (K + 2) units of rounding of the
/// terms' magnitude (Higham's gamma), so the check holds for every clone.
double roundingBound(int64_t K, double magnitude, double prior) {
  constexpr double kUnitRoundoff = 5.960464477539063e-8; // 2^-24
  return (K + 2) * kUnitRoundoff * (magnitude + std::fabs(prior)) + 1e-30;
}

TEST(TileGemmTest, MatchesADoubleLoopOnEveryShapeClass) {
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 4, 5, 9, 64})
    for (int64_t K : {1, 16, 33, 64})
      for (int64_t n : {1, 15, 16, 17, 32, 48, 64, 65, 100})
        for (bool accumulate : {false, true}) {
          // Leading dimensions wider than the tiles, as in attention's
          // strided head views.
          int64_t lda = K + 3, ldb = n + 5, ldc = n + 7;
          auto A = randomVector(rows * lda, seed++);
          auto B = randomVector(K * ldb, seed++);
          auto C = randomVector(rows * ldc, seed++);
          std::vector<float> before = C;
          float alpha = 0.75f;
          detail::tileGemm(A.data(), lda, rows, K, B.data(), ldb, n, alpha,
                           C.data(), ldc, accumulate);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0.0, magnitude = 0.0;
              for (int64_t k = 0; k < K; ++k) {
                double term =
                    static_cast<double>(A[r * lda + k]) * B[k * ldb + j];
                sum += term;
                magnitude += std::fabs(term);
              }
              double prior = accumulate ? before[r * ldc + j] : 0.0;
              double want = alpha * sum + prior;
              double bound = roundingBound(K, alpha * magnitude, prior);
              ASSERT_NEAR(C[r * ldc + j], want, bound)
                  << rows << "x" << n << "x" << K << " at (" << r << ", " << j
                  << "), accumulate " << accumulate;
            }
            // Padding between rows is never written.
            for (int64_t j = n; j < ldc; ++j)
              ASSERT_EQ(C[r * ldc + j], before[r * ldc + j]);
          }
        }
}

TEST(TileGemmTest, ReductionsPastAnyFixedPadStillWork) {
  // A reduction and a width larger than the kernel's register tiles and
  // any stack pad, with a row count that needs padding rows.
  int64_t rows = 3, K = 1500, n = 1100;
  auto A = randomVector(rows * K, 7), B = randomVector(K * n, 8);
  std::vector<float> C(rows * n);
  detail::tileGemm(A.data(), K, rows, K, B.data(), n, n, 1.0f, C.data(), n,
                   false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; j += 97) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        double term = static_cast<double>(A[r * K + k]) * B[k * n + j];
        sum += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(C[r * n + j], sum, roundingBound(K, magnitude, 0.0));
    }
}

} // namespace
