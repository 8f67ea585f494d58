//===- Fp8.cpp - OCP FP8 formats and scaling, emulated in fp32 ------------===//
//
// Encoding works on the value, not on fp32's bits: |x| is scaled by a power
// of two (exact in fp32) so that one unit is the spacing of the FP8 grid at
// its exponent, then rounded to an integer with nearbyint (ties to even in
// the default rounding mode). The integer is the code's exponent and
// mantissa fields side by side, so a mantissa that rounds up to the next
// binade carries into the exponent by itself.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/StepSemantics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace moe::rt::cpu {
namespace {

constexpr Fp8Spec kE4M3{4, 3, 7, 448.0f, false};
constexpr Fp8Spec kE5M2{5, 2, 15, 57344.0f, true};

constexpr uint8_t kSignBit = 0x80;

/// The code of the largest finite value.
uint8_t maxFiniteCode(const Fp8Spec &spec) {
  return spec.hasInfinity ? 0x7B /* 0.11110.11 */ : 0x7E /* 0.1111.110 */;
}
/// The NaN a conversion produces: 0.1111.111 (E4M3's only one) and
/// 0.11111.11 (E5M2's), all ones, as hardware's canonical NaN.
constexpr uint8_t kNanCode = 0x7F;
constexpr uint8_t kInfinityCode = 0x7C; // E5M2: 0.11111.00

} // namespace

const Fp8Spec &fp8Spec(Fp8Format format) {
  return format == Fp8Format::E4M3 ? kE4M3 : kE5M2;
}

const char *fp8FormatName(Fp8Format format) {
  return format == Fp8Format::E4M3 ? "e4m3" : "e5m2";
}

uint8_t encodeFp8(float value, Fp8Format format, bool saturate) {
  const Fp8Spec &spec = fp8Spec(format);
  if (std::isnan(value))
    return kNanCode;
  uint8_t sign = std::signbit(value) ? kSignBit : 0;
  float magnitude = std::fabs(value);
  uint8_t overflow = saturate          ? maxFiniteCode(spec)
                     : spec.hasInfinity ? kInfinityCode
                                        : kNanCode;
  if (std::isinf(magnitude))
    return sign | overflow;
  // The exponent of the grid spacing: that of subnormals below the smallest
  // normal binade, else the value's own binade's.
  int minExponent = 1 - spec.bias;
  int exponent = std::max(std::ilogb(magnitude), minExponent);
  if (magnitude == 0.0f)
    exponent = minExponent;
  float units = std::nearbyint(
      std::ldexp(magnitude, spec.mantissaBits - exponent));
  // units is in [0, 2^(m+1)]: the mantissa with its implicit bit, which a
  // subnormal lacks. Its exponent field is one more than the binade index.
  int64_t fields = static_cast<int64_t>(units) +
                   (static_cast<int64_t>(exponent - minExponent)
                    << spec.mantissaBits);
  if (fields > maxFiniteCode(spec))
    return sign | overflow;
  return sign | static_cast<uint8_t>(fields);
}

float decodeFp8(uint8_t code, Fp8Format format) {
  const Fp8Spec &spec = fp8Spec(format);
  float sign = (code & kSignBit) ? -1.0f : 1.0f;
  uint8_t magnitude = code & ~kSignBit;
  if (magnitude > maxFiniteCode(spec)) {
    if (spec.hasInfinity && magnitude == kInfinityCode)
      return sign * std::numeric_limits<float>::infinity();
    return std::numeric_limits<float>::quiet_NaN();
  }
  int mantissa = magnitude & ((1 << spec.mantissaBits) - 1);
  int exponentField = magnitude >> spec.mantissaBits;
  if (exponentField == 0)
    return sign * std::ldexp(static_cast<float>(mantissa),
                             1 - spec.bias - spec.mantissaBits);
  return sign * std::ldexp(static_cast<float>(mantissa +
                                              (1 << spec.mantissaBits)),
                           exponentField - spec.bias - spec.mantissaBits);
}

float roundToFp8(float value, Fp8Format format, bool saturate) {
  return decodeFp8(encodeFp8(value, format, saturate), format);
}

float absMax(const float *x, int64_t n) { return semantics::absMax(x, n); }

float fp8Scale(float amax, Fp8Format format) {
  return semantics::fp8Scale(amax, fp8Spec(format).maxFinite);
}

void quantizeDequantize(const float *x, float *out, int64_t n, float scale,
                        Fp8Format format) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = roundToFp8(x[i] * scale, format) / scale;
}

float quantizeTensorwise(const float *x, float *out, int64_t n,
                         Fp8Format format) {
  float amax = absMax(x, n);
  quantizeDequantize(x, out, n, fp8Scale(amax, format), format);
  return amax;
}

void quantizeBlockwise(const float *x, float *out, int64_t rows, int64_t cols,
                       int64_t blockRows, int64_t blockCols,
                       Fp8Format format) {
  for (int64_t r0 = 0; r0 < rows; r0 += blockRows)
    for (int64_t c0 = 0; c0 < cols; c0 += blockCols) {
      int64_t r1 = std::min(rows, r0 + blockRows);
      int64_t c1 = std::min(cols, c0 + blockCols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        amax = std::max(amax, absMax(x + r * cols + c0, c1 - c0));
      float scale = fp8Scale(amax, format);
      for (int64_t r = r0; r < r1; ++r)
        quantizeDequantize(x + r * cols + c0, out + r * cols + c0, c1 - c0,
                           scale, format);
    }
}

float quantizeDelayed(const float *x, float *out, int64_t n, Fp8Format format,
                      float *amaxes, int64_t length) {
  float amax = absMax(x, n);
  quantizeDequantize(x, out, n,
                     fp8Scale(semantics::delayedAmax(amaxes, length, amax), format),
                     format);
  semantics::recordAmax(amaxes, amax);
  return amax;
}

void rollAmaxHistory(float *amaxes, int64_t length) {
  semantics::rollAmaxHistory(amaxes, length);
}

int64_t packedFp8Words(int64_t n, int64_t block) {
  return (n + 3) / 4 + (n + block - 1) / block;
}

void packFp8Row(const float *row, int64_t n, int64_t block, Fp8Format format,
                int32_t *words) {
  int64_t codeWords = (n + 3) / 4;
  std::fill(words, words + codeWords, 0);
  auto *codes = reinterpret_cast<uint8_t *>(words);
  for (int64_t b0 = 0, k = 0; b0 < n; b0 += block, ++k) {
    int64_t b1 = std::min(n, b0 + block);
    float scale = fp8Scale(absMax(row + b0, b1 - b0), format);
    for (int64_t i = b0; i < b1; ++i)
      codes[i] = encodeFp8(row[i] * scale, format);
    std::memcpy(words + codeWords + k, &scale, sizeof(float));
  }
}

void unpackFp8Row(const int32_t *words, int64_t n, int64_t block,
                  Fp8Format format, float *row) {
  int64_t codeWords = (n + 3) / 4;
  const auto *codes = reinterpret_cast<const uint8_t *>(words);
  for (int64_t b0 = 0, k = 0; b0 < n; b0 += block, ++k) {
    float scale;
    std::memcpy(&scale, words + codeWords + k, sizeof(float));
    int64_t b1 = std::min(n, b0 + block);
    for (int64_t i = b0; i < b1; ++i)
      row[i] = decodeFp8(codes[i], format) / scale;
  }
}

} // namespace moe::rt::cpu
