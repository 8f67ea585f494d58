//===- Float16.cpp - bfloat16 and IEEE half conversions -------------------===//
//
// bfloat16 is the top half of an fp32. IEEE half has 5 exponent bits (bias
// 15) and 10 mantissa bits; its subnormals are normal numbers in fp32.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/Float16.h"

#include <cstring>

namespace moe::rt::io {

namespace {

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

} // namespace

float bf16ToFloat(uint16_t bits) {
  return bitsToFloat(static_cast<uint32_t>(bits) << 16);
}

uint16_t floatToBf16(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

float f16ToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) // inf or NaN
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0)
    return bitsToFloat(sign);
  // Subnormal: mantissa * 2^-24, exact in fp32.
  float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

uint16_t floatToF16(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) // rounds to >= 65520: infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) { // below the smallest normal half, 2^-14
    // Scale to units of 2^-24 and round to nearest even.
    float scaled = bitsToFloat(magnitude) * 16777216.0f;
    uint32_t whole = static_cast<uint32_t>(scaled);
    float fraction = scaled - static_cast<float>(whole);
    if (fraction > 0.5f || (fraction == 0.5f && (whole & 1u)))
      ++whole;
    return static_cast<uint16_t>(sign | whole);
  }
  uint32_t exponent = (magnitude >> 23) - 112;
  uint32_t mantissa = magnitude & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half; // may carry into the exponent, which is correct
  return static_cast<uint16_t>(sign | half);
}

} // namespace moe::rt::io
