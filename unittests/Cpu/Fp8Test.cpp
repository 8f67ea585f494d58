//===- Fp8Test.cpp - the FP8 emulation against the OCP specification ------===//
//
// Every code of both formats decodes to the value the OFP8 specification's
// formula gives (written out here independently of the implementation),
// every finite code is reached again from its value, every midpoint between
// neighbours rounds to the even one and anything off the midpoint to the
// nearer one, and the ends of the range saturate or overflow as specified.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Fp8.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <vector>

namespace moe::rt::cpu {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};

/// The specification's value of a code: (-1)^S 2^(E - bias) (1 + M / 2^m)
/// for normals, (-1)^S 2^(1 - bias) (M / 2^m) for subnormals; E4M3's
/// S.1111.111 is NaN, E5M2's S.11111.00 infinity and S.11111.xx NaN.
double specValue(uint8_t code, Fp8Format format) {
  int e = format == Fp8Format::E4M3 ? 4 : 5, m = 7 - e;
  int bias = format == Fp8Format::E4M3 ? 7 : 15;
  double sign = (code & 0x80) ? -1.0 : 1.0;
  int exponent = (code >> m) & ((1 << e) - 1);
  int mantissa = code & ((1 << m) - 1);
  if (format == Fp8Format::E4M3 && exponent == 15 && mantissa == 7)
    return std::numeric_limits<double>::quiet_NaN();
  if (format == Fp8Format::E5M2 && exponent == 31)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0)
    return sign * std::pow(2.0, 1 - bias) * (mantissa / std::pow(2.0, m));
  return sign * std::pow(2.0, exponent - bias) *
         (1.0 + mantissa / std::pow(2.0, m));
}

/// The positive finite values in increasing order, with their codes.
std::vector<std::pair<float, uint8_t>> positiveGrid(Fp8Format format) {
  std::vector<std::pair<float, uint8_t>> grid;
  for (int code = 0; code < 0x80; ++code) {
    double value = specValue(static_cast<uint8_t>(code), format);
    if (std::isfinite(value))
      grid.emplace_back(static_cast<float>(value), code);
  }
  return grid;
}

TEST(Fp8Test, FormatParameters) {
  EXPECT_EQ(fp8Spec(Fp8Format::E4M3).maxFinite, 448.0f);
  EXPECT_EQ(fp8Spec(Fp8Format::E5M2).maxFinite, 57344.0f);
  EXPECT_EQ(decodeFp8(0x01, Fp8Format::E4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(decodeFp8(0x08, Fp8Format::E4M3), std::ldexp(1.0f, -6));
  EXPECT_EQ(decodeFp8(0x01, Fp8Format::E5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(decodeFp8(0x04, Fp8Format::E5M2), std::ldexp(1.0f, -14));
  EXPECT_EQ(decodeFp8(0x7E, Fp8Format::E4M3), 448.0f);
  EXPECT_EQ(decodeFp8(0x7B, Fp8Format::E5M2), 57344.0f);
  EXPECT_STREQ(fp8FormatName(Fp8Format::E4M3), "e4m3");
}

TEST(Fp8Test, EveryCodeDecodesToTheSpecificationsValue) {
  for (Fp8Format format : kFormats)
    for (int code = 0; code < 256; ++code) {
      SCOPED_TRACE(std::string(fp8FormatName(format)) + " code " +
                   std::to_string(code));
      double want = specValue(static_cast<uint8_t>(code), format);
      float got = decodeFp8(static_cast<uint8_t>(code), format);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got));
      } else {
        EXPECT_EQ(static_cast<double>(got), want);
        EXPECT_EQ(std::signbit(got), (code & 0x80) != 0); // -0 included
      }
    }
  // Two NaNs in E4M3 (no infinities), six NaNs and two infinities in E5M2.
  int e4m3Nans = 0, e5m2Nans = 0, e5m2Infinities = 0;
  for (int code = 0; code < 256; ++code) {
    e4m3Nans += std::isnan(decodeFp8(code, Fp8Format::E4M3));
    e5m2Nans += std::isnan(decodeFp8(code, Fp8Format::E5M2));
    e5m2Infinities += std::isinf(decodeFp8(code, Fp8Format::E5M2));
  }
  EXPECT_EQ(e4m3Nans, 2);
  EXPECT_EQ(e5m2Nans, 6);
  EXPECT_EQ(e5m2Infinities, 2);
}

TEST(Fp8Test, EveryFiniteValueEncodesToItsCode) {
  for (Fp8Format format : kFormats)
    for (int code = 0; code < 256; ++code) {
      float value = decodeFp8(static_cast<uint8_t>(code), format);
      if (!std::isfinite(value))
        continue;
      EXPECT_EQ(encodeFp8(value, format), code)
          << fp8FormatName(format) << " " << value;
      EXPECT_EQ(encodeFp8(value, format, /*saturate=*/false), code);
    }
  // Infinity is E5M2's own value when not saturating.
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(encodeFp8(inf, Fp8Format::E5M2, false), 0x7C);
  EXPECT_EQ(encodeFp8(-inf, Fp8Format::E5M2, false), 0xFC);
}

TEST(Fp8Test, RoundsToNearestTiesToEven) {
  for (Fp8Format format : kFormats) {
    std::vector<std::pair<float, uint8_t>> grid = positiveGrid(format);
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
      auto [low, lowCode] = grid[i];
      auto [high, highCode] = grid[i + 1];
      SCOPED_TRACE(std::string(fp8FormatName(format)) + " between " +
                   std::to_string(low) + " and " + std::to_string(high));
      // fp32 holds every FP8 midpoint exactly (at most 5 significant bits).
      float mid = (low + high) / 2;
      ASSERT_EQ(static_cast<double>(mid),
                (static_cast<double>(low) + high) / 2);
      uint8_t even = (lowCode & 1) == 0 ? lowCode : highCode;
      EXPECT_EQ(encodeFp8(mid, format), even);
      EXPECT_EQ(encodeFp8(-mid, format), even | 0x80);
      EXPECT_EQ(encodeFp8(std::nextafter(mid, 0.0f), format), lowCode);
      EXPECT_EQ(encodeFp8(std::nextafter(mid, high), format), highCode);
    }
  }
}

TEST(Fp8Test, BelowTheSmallestSubnormal) {
  for (Fp8Format format : kFormats) {
    float tiny = decodeFp8(0x01, format);
    // Half the smallest subnormal is a tie between 0 (even) and it.
    EXPECT_EQ(encodeFp8(tiny / 2, format), 0x00);
    EXPECT_EQ(encodeFp8(std::nextafter(tiny / 2, 1.0f), format), 0x01);
    EXPECT_EQ(encodeFp8(-tiny / 4, format), 0x80); // -0 keeps its sign
    EXPECT_EQ(encodeFp8(std::numeric_limits<float>::denorm_min(), format),
              0x00);
  }
}

TEST(Fp8Test, BeyondTheRange) {
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  // E4M3: 448 is the largest; the tie at 464 goes to 448 (even mantissa);
  // above it the value would round to 480, which E4M3 does not have.
  EXPECT_EQ(encodeFp8(464.0f, Fp8Format::E4M3, false), 0x7E);
  EXPECT_EQ(encodeFp8(std::nextafter(464.0f, inf), Fp8Format::E4M3, false),
            0x7F);
  EXPECT_EQ(encodeFp8(1e6f, Fp8Format::E4M3, false), 0x7F);
  EXPECT_EQ(encodeFp8(-1e6f, Fp8Format::E4M3, false), 0xFF);
  EXPECT_EQ(encodeFp8(1e6f, Fp8Format::E4M3), 0x7E);
  EXPECT_EQ(encodeFp8(-inf, Fp8Format::E4M3), 0xFE);
  // E5M2: the tie at 61440 goes to 65536 (even), which is infinity.
  EXPECT_EQ(encodeFp8(std::nextafter(61440.0f, 0.0f), Fp8Format::E5M2, false),
            0x7B);
  EXPECT_EQ(encodeFp8(61440.0f, Fp8Format::E5M2, false), 0x7C);
  EXPECT_EQ(encodeFp8(61440.0f, Fp8Format::E5M2), 0x7B);
  EXPECT_EQ(encodeFp8(inf, Fp8Format::E5M2), 0x7B);
  EXPECT_EQ(encodeFp8(-1e30f, Fp8Format::E5M2), 0xFB);
  for (Fp8Format format : kFormats) {
    EXPECT_TRUE(std::isnan(decodeFp8(encodeFp8(nan, format), format)));
    EXPECT_TRUE(std::isnan(roundToFp8(-nan, format, false)));
  }
}

TEST(Fp8Test, ScalesAndAmax) {
  std::vector<float> x = {0.5f, -3.0f, 2.0f};
  EXPECT_EQ(absMax(x.data(), 3), 3.0f);
  EXPECT_EQ(fp8Scale(3.0f, Fp8Format::E4M3), 448.0f / 3.0f);
  EXPECT_EQ(fp8Scale(0.0f, Fp8Format::E4M3), 1.0f);
  EXPECT_EQ(fp8Scale(std::numeric_limits<float>::infinity(), Fp8Format::E5M2),
            1.0f);
  EXPECT_TRUE(std::isfinite(fp8Scale(1e-40f, Fp8Format::E5M2)));
  x.push_back(std::nanf(""));
  EXPECT_TRUE(std::isnan(absMax(x.data(), 4)));
}

TEST(Fp8Test, TensorwiseMapsTheAmaxOntoTheLargestValue) {
  std::vector<float> x = {0.001f, -0.75f, 0.3f, 0.0f, 0.1234f};
  std::vector<float> out(x.size());
  float amax = quantizeTensorwise(x.data(), out.data(), x.size(),
                                  Fp8Format::E4M3);
  EXPECT_EQ(amax, 0.75f);
  float scale = 448.0f / 0.75f;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], roundToFp8(x[i] * scale, Fp8Format::E4M3) / scale);
    // Three mantissa bits: within 1/16 relative (subnormals aside).
    if (std::fabs(x[i] * scale) >= std::ldexp(1.0f, -6))
      EXPECT_NEAR(out[i], x[i], std::fabs(x[i]) / 16);
  }
  EXPECT_EQ(out[1], -0.75f);
}

TEST(Fp8Test, BlockwiseScalesEachBlockByItsOwnAmax) {
  // A 2 x 3 matrix in 1 x 2 blocks (the last one of each row 1 x 1): a huge
  // value in one block does not crush the small ones of the others.
  std::vector<float> x = {1e4f, 3e-3f, 7e-3f, 1e-3f, 2e-3f, 5e-4f};
  std::vector<float> out(6), whole(6);
  quantizeBlockwise(x.data(), out.data(), 2, 3, 1, 2, Fp8Format::E4M3);
  for (size_t i = 0; i < 6; ++i) {
    int row = i / 3, block = (i % 3) / 2;
    float amax = 0;
    for (int j = row * 3 + block * 2; j < std::min(row * 3 + block * 2 + 2,
                                                   row * 3 + 3);
         ++j)
      amax = std::max(amax, std::fabs(x[j]));
    float scale = 448.0f / amax;
    EXPECT_EQ(out[i], roundToFp8(x[i] * scale, Fp8Format::E4M3) / scale) << i;
  }
  EXPECT_EQ(out[0], 1e4f); // each block's amax maps onto 448 exactly
  quantizeTensorwise(x.data(), whole.data(), 6, Fp8Format::E4M3);
  // Tensorwise, 5e-4 falls below E4M3's range relative to 1e4 and is lost.
  EXPECT_EQ(whole[5], 0.0f);
  EXPECT_NEAR(out[5], 5e-4f, 5e-4f / 16);
}

TEST(Fp8Test, DelayedScalingUsesTheHistory) {
  // [0] this step's amax, [1, 3) the last two steps', newest first.
  std::vector<float> history(3, 0.0f);
  std::vector<float> x = {1.0f, -2.0f}, out(2);
  // First step: no history yet, the current amax is used, then recorded.
  EXPECT_EQ(quantizeDelayed(x.data(), out.data(), 2, Fp8Format::E4M3,
                            history.data(), 3),
            2.0f);
  EXPECT_EQ(history, (std::vector<float>{2.0f, 0.0f, 0.0f}));
  EXPECT_EQ(out[1], -2.0f);
  // Within a step the amax only grows; the scale does not change.
  std::vector<float> small = {0.5f, 0.25f};
  quantizeDelayed(small.data(), out.data(), 2, Fp8Format::E4M3,
                  history.data(), 3);
  EXPECT_EQ(history, (std::vector<float>{2.0f, 0.0f, 0.0f}));
  rollAmaxHistory(history.data(), 3);
  EXPECT_EQ(history, (std::vector<float>{0.0f, 2.0f, 0.0f}));
  // A larger value now is scaled by the history's amax (2) and saturates.
  std::vector<float> y = {8.0f, 1.0f};
  quantizeDelayed(y.data(), out.data(), 2, Fp8Format::E4M3, history.data(), 3);
  EXPECT_EQ(out[0], 448.0f / (448.0f / 2.0f)); // clipped to the old range
  EXPECT_EQ(history, (std::vector<float>{8.0f, 2.0f, 0.0f}));
  rollAmaxHistory(history.data(), 3);
  quantizeDelayed(y.data(), out.data(), 2, Fp8Format::E4M3, history.data(), 3);
  EXPECT_EQ(out[0], 8.0f);
  rollAmaxHistory(history.data(), 3);
  EXPECT_EQ(history, (std::vector<float>{0.0f, 8.0f, 8.0f}));
  // The oldest step drops out.
  quantizeDelayed(x.data(), out.data(), 2, Fp8Format::E4M3, history.data(), 3);
  rollAmaxHistory(history.data(), 3);
  EXPECT_EQ(history, (std::vector<float>{0.0f, 2.0f, 8.0f}));
}

TEST(Fp8Test, DelayedScalingKeepsANanAmax) {
  std::vector<float> history = {1.0f, 1.0f};
  std::vector<float> x = {std::nanf(""), 1.0f}, out(2);
  quantizeDelayed(x.data(), out.data(), 2, Fp8Format::E4M3, history.data(), 2);
  EXPECT_TRUE(std::isnan(history[0]));
}

TEST(Fp8Test, RowsTravelAsCodesAndBlockScales) {
  // 10 values in blocks of 4: 3 code words (10 bytes, padded) and 3 scales.
  std::vector<float> row = {1.0f, -2.0f, 0.5f, 3.0f, 1e-3f, 0.0f,
                            -7.0f, 2.5f, 100.0f, -0.25f};
  EXPECT_EQ(packedFp8Words(10, 4), 3 + 3);
  for (Fp8Format format : kFormats) {
    std::vector<int32_t> words(packedFp8Words(10, 4));
    packFp8Row(row.data(), 10, 4, format, words.data());
    std::vector<float> back(10), expected(10);
    unpackFp8Row(words.data(), 10, 4, format, back.data());
    // Exactly what blockwise quantize-dequantize gives, block by block.
    quantizeBlockwise(row.data(), expected.data(), 1, 10, 1, 4, format);
    EXPECT_EQ(back, expected) << fp8FormatName(format);
  }
}

} // namespace
} // namespace moe::rt::cpu
