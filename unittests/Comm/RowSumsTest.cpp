//===- RowSumsTest.cpp - the BF16 sums of allReduceSum and reduceScatterSum ===//
//
// sumRows is what the rank owning a chunk computes from every rank's copy
// (one row per group rank), so rows of 2 and 3 are the sums of groups of 2
// and 3 ranks.
//
//===----------------------------------------------------------------------===//
#include "RowSums.h"

#include "moe/Runtime/IO/Float16.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdint>
#include <vector>

using namespace moe::rt;
using comm::Bf16;

namespace {

/// One element summed over ranks holding `values` (bits), in that order.
uint16_t sumOfRanks(const std::vector<uint16_t> &values) {
  std::vector<Bf16> rows;
  for (uint16_t bits : values)
    rows.push_back({bits});
  Bf16 out{0xffff};
  comm::detail::sumRows(&out, rows.data(), static_cast<int>(rows.size()), 1);
  return out.bits;
}

// BF16 bits of the values below.
constexpr uint16_t kOne = 0x3f80, kOnePlus2m7 = 0x3f81, kOnePlus2m6 = 0x3f82;
constexpr uint16_t k2m8 = 0x3b80, k2m30 = 0x3080;
constexpr uint16_t k2p24 = 0x4b80, kMinus2p24 = 0xcb80;
constexpr uint16_t kPlusZero = 0x0000, kMinusZero = 0x8000;
constexpr uint16_t kInf = 0x7f80, kMinusInf = 0xff80, kMax = 0x7f7f;

TEST(Bf16RowSums, TwoRanksRoundOnceToNearestEven) {
  EXPECT_EQ(sumOfRanks({kOne, kOne}), 0x4000); // 2
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the even one, 1.
  EXPECT_EQ(sumOfRanks({kOne, k2m8}), kOne);
  // 1 + 2^-7 + 2^-8 lies halfway too: the even one is now above.
  EXPECT_EQ(sumOfRanks({kOnePlus2m7, k2m8}), kOnePlus2m6);
  // 2^24 + 1 is 2^24 in fp32 already.
  EXPECT_EQ(sumOfRanks({k2p24, kOne}), k2p24);
  EXPECT_EQ(sumOfRanks({kMinusZero, kMinusZero}), kMinusZero);
  EXPECT_EQ(sumOfRanks({kMinusZero, kPlusZero}), kPlusZero);
  EXPECT_EQ(sumOfRanks({kInf, kOne}), kInf);
  // The largest finite BF16 twice overflows to infinity.
  EXPECT_EQ(sumOfRanks({kMax, kMax}), kInf);
  uint16_t nan = sumOfRanks({kInf, kMinusInf});
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
}

TEST(Bf16RowSums, ThreeRanksAddInRankOrder) {
  // Rank order: (2^24 + 1) - 2^24 = 0 in fp32. Another order gives 1.
  EXPECT_EQ(sumOfRanks({k2p24, kOne, kMinus2p24}), kPlusZero);
  EXPECT_EQ(sumOfRanks({kMinus2p24, kOne, k2p24}), kOne);
  EXPECT_EQ(sumOfRanks({k2p24, kMinus2p24, kOne}), kOne);
}

TEST(Bf16RowSums, ThreeRanksRoundOnlyTheTotal) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7. Rounding after each addition would turn
  // each 1 + 2^-8 (a tie) into 1 and end at 1.
  EXPECT_EQ(sumOfRanks({kOne, k2m8, k2m8}), kOnePlus2m7);
  // The fp32 sum drops the 2^-30, leaving a tie that goes to 1: the staged
  // fp32 path's result, though the exact sum would round up.
  EXPECT_EQ(sumOfRanks({kOne, k2m8, k2m30}), kOne);
}

TEST(Bf16RowSums, EqualTheRoundedFp32SumOfEveryElement) {
  // Rows of 2 and 3 ranks over many values: element e of the result is
  // RNE(((x0 + x1) + x2)) of the decoded values, bit for bit.
  for (int n : {2, 3}) {
    const size_t count = 4099;
    std::vector<Bf16> rows(n * count);
    uint32_t state = 12345;
    for (Bf16 &value : rows) {
      state = state * 1664525u + 1013904223u;
      // Finite values over a wide exponent range, both signs.
      uint16_t bits = static_cast<uint16_t>(state >> 16);
      if ((bits & 0x7f80) == 0x7f80)
        bits ^= 0x4000;
      value.bits = bits;
    }
    std::vector<Bf16> out(count);
    comm::detail::sumRows(out.data(), rows.data(), n, count);
    for (size_t e = 0; e < count; ++e) {
      float total = io::bf16ToFloat(rows[e].bits);
      for (int r = 1; r < n; ++r)
        total += io::bf16ToFloat(rows[r * count + e].bits);
      ASSERT_EQ(out[e].bits, io::floatToBf16(total))
          << "element " << e << " of " << n << " rows";
    }
  }
}

} // namespace
