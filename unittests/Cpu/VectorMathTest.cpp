//===- VectorMathTest.cpp - the vectorised exp ----------------------------===//
//
// detail::expShifted (lib/Runtime/Cpu/VectorMath.cpp) against exp in double,
// over the whole range softmax and SiLU feed it, on this machine's clone of
// it (AVX-512, AVX2 or the baseline, whichever the loader picked).
//
//===----------------------------------------------------------------------===//
#include "../../lib/Runtime/Cpu/KernelUtils.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace moe::rt::cpu {
namespace {

TEST(VectorMathTest, ExpWithinTwoMillionthsRelative) {
  // (The clones measure about 8e-8 here: within an ulp or so.)
  // Every 1/1024 from -87 to 88, and the odd lengths a vector loop has
  // remainders for.
  std::vector<float> x;
  for (double v = -87.0; v <= 88.0; v += 1.0 / 1024)
    x.push_back(static_cast<float>(v));
  std::vector<float> y(x.size());
  detail::expShifted(x.data(), y.data(), static_cast<int64_t>(x.size()), 0.0f);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double exact = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - exact) / exact);
  }
  EXPECT_LT(worst, 2e-6) << "worst relative error " << worst;
  float one = 0.0f;
  detail::expShifted(&one, &one, 1, 0.0f);
  EXPECT_EQ(one, 1.0f);
}

TEST(VectorMathTest, ShiftInPlaceAndEdges) {
  std::vector<float> row = {3.0f, 1.0f, -2.0f, 3.0f, 0.5f};
  std::vector<float> want(row.size());
  for (size_t i = 0; i < row.size(); ++i)
    want[i] = static_cast<float>(std::exp(static_cast<double>(row[i]) - 3.0));
  detail::expShifted(row.data(), row.data(), 5, 3.0f);
  for (size_t i = 0; i < row.size(); ++i)
    EXPECT_NEAR(row[i], want[i], 2e-6 * want[i]) << i;
  // The edges inside a long array too, where the vector loop takes them.
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t at : {size_t(0), size_t(20)}) {
    std::vector<float> edges(37, 1.0f);
    edges[at] = nan;
    edges[at + 1] = -200.0f;
    edges[at + 2] = 200.0f;
    edges[at + 3] = -std::numeric_limits<float>::infinity();
    detail::expShifted(edges.data(), edges.data(), 37, 0.0f);
    EXPECT_TRUE(std::isnan(edges[at])) << "a NaN stays NaN";
    EXPECT_EQ(edges[at + 1], 0.0f) << "underflow is 0";
    EXPECT_EQ(edges[at + 2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(edges[at + 3], 0.0f);
    EXPECT_NEAR(edges[at + 4], std::exp(1.0f), 1e-6f);
  }
  // Nothing is read or written beyond n.
  float guard[3] = {1.0f, 2.0f, 7.0f};
  detail::expShifted(guard, guard, 2, 0.0f);
  EXPECT_EQ(guard[2], 7.0f);
}

TEST(VectorMathTest, RowMaxAndExpSumCoverEveryTail) {
  // Lengths below, at and past the 16 lanes, so that the remainder loop
  // and the lane combine both run.
  EXPECT_EQ(detail::rowMax(nullptr, 0),
            -std::numeric_limits<float>::infinity());
  for (int64_t n : {1, 5, 15, 16, 17, 33, 100}) {
    std::vector<float> row(n);
    for (int64_t i = 0; i < n; ++i)
      row[i] = static_cast<float>((i * 37) % 23) * 0.25f - 3.0f;
    float most = *std::max_element(row.begin(), row.end());
    EXPECT_EQ(detail::rowMax(row.data(), n), most) << n;
    std::vector<float> exps(n), sumOut(n);
    detail::expShifted(row.data(), exps.data(), n, most);
    double sum = detail::expShiftedSum(row.data(), sumOut.data(), n, most);
    double want = 0.0;
    for (float value : exps)
      want += value;
    EXPECT_EQ(std::memcmp(exps.data(), sumOut.data(), n * sizeof(float)), 0)
        << "the same exp as expShifted, n " << n;
    // Doubles adding at most 100 floats: far below float precision.
    EXPECT_NEAR(sum, want, 1e-12 * want) << n;
  }
}

} // namespace
} // namespace moe::rt::cpu
