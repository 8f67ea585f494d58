//===- Float16Test.cpp - bfloat16 and IEEE half conversions ---------------===//
#include "moe/Runtime/IO/Float16.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace moe::rt::io;

namespace {

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

TEST(Float16, Bf16IsTheTopHalfOfAnF32) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float value = bf16ToFloat(static_cast<uint16_t>(bits));
    EXPECT_EQ(bitsOf(value), bits << 16);
    if (!std::isnan(value)) {
      EXPECT_EQ(floatToBf16(value), bits);
    }
  }
}

TEST(Float16, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(floatToBf16(fromBits(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(floatToBf16(fromBits(0x3f818000)), 0x3f82);
  EXPECT_EQ(floatToBf16(fromBits(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(
      bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
}

TEST(Float16, F16RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float value = f16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(value))));
      continue;
    }
    EXPECT_EQ(floatToF16(value), bits) << "bits " << bits;
  }
}

TEST(Float16, F16KnownValues) {
  EXPECT_EQ(f16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(f16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(f16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16ToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(floatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(floatToF16(65520.0f), 0x7c00);
  EXPECT_EQ(floatToF16(1e-9f), 0x0000);
  EXPECT_EQ(floatToF16(-1e-9f), 0x8000);
  EXPECT_EQ(floatToF16(std::ldexp(1.5f, -24)), 0x0002); // tie to even
  EXPECT_EQ(floatToF16(std::ldexp(0.5f, -24)), 0x0000); // tie to even
}

} // namespace
