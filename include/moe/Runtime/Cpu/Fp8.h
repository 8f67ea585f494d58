//===- Fp8.h - OCP FP8 formats and scaling, emulated in fp32 ----*- C++ -*-===//
//
// The two 8-bit floating-point formats of the OCP 8-bit Floating Point
// Specification (OFP8, rev. 1.0), bit-exact:
//   * E4M3: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, one
//     NaN per sign (S.1111.111); largest finite 448, smallest subnormal 2^-9.
//   * E5M2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: S.11111.00
//     is infinity, S.11111.{01,10,11} NaN; largest finite 57344, smallest
//     subnormal 2^-16.
// Conversion from fp32 rounds to nearest, ties to even, like the hardware
// casts (cvt.rn.satfinite on Hopper). With saturation (training's casts),
// finite values beyond the range and infinities become the largest finite
// value of their sign (CUDA's __NV_SATFINITE); without it they become NaN
// (E4M3) or infinity (E5M2), as the specification's non-saturating mode
// says. NaN stays NaN (code S.1111.111 / S.11111.11).
//
// Training keeps tensors in fp32 on the CPU and emulates an FP8 GEMM by
// quantizing its inputs: multiply by a scale, round to FP8, and divide the
// scale back out (quantize-dequantize), which gives exactly the values an
// FP8 tensor core would read. The scaling recipes choose the scales:
// tensorwise (current amax), delayed (amax history, as Transformer Engine)
// and blockwise (one scale per 1 x 128 activation block or 128 x 128 weight
// block, as DeepSeek-V3).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CPU_FP8_H
#define MOE_RUNTIME_CPU_FP8_H

#include <cstdint>
#include <vector>

namespace moe::rt::cpu {

enum class Fp8Format : uint8_t { E4M3 = 0, E5M2 = 1 };

/// The parameters of a format.
struct Fp8Spec {
  int exponentBits, mantissaBits, bias;
  /// The largest finite value.
  float maxFinite;
  bool hasInfinity;
};
const Fp8Spec &fp8Spec(Fp8Format format);
/// "e4m3" / "e5m2".
const char *fp8FormatName(Fp8Format format);

/// The FP8 code nearest to `value` (ties to even), see the file comment for
/// what happens beyond the range.
uint8_t encodeFp8(float value, Fp8Format format, bool saturate = true);
/// The value of an FP8 code (every code has one; NaN codes give NaN).
float decodeFp8(uint8_t code, Fp8Format format);
/// decodeFp8(encodeFp8(value)): `value` rounded onto the FP8 grid.
float roundToFp8(float value, Fp8Format format, bool saturate = true);

/// The largest |x| of x[0, n); NaN if any element is NaN.
float absMax(const float *x, int64_t n);

/// The scale that maps `amax` onto the format's largest finite value
/// (Transformer Engine's, with no margin): maxFinite / amax; 1 for amax 0
/// and for a non-finite amax (the values are then not finite either).
float fp8Scale(float amax, Fp8Format format);

/// out = round(x * scale) / scale elementwise, saturating: the fp32 values
/// an FP8 tensor with that scale holds. out may be x.
void quantizeDequantize(const float *x, float *out, int64_t n, float scale,
                        Fp8Format format);

/// Tensorwise current scaling: one scale from the tensor's own amax.
/// Returns the amax.
float quantizeTensorwise(const float *x, float *out, int64_t n,
                         Fp8Format format);

/// Blockwise scaling of a row-major [rows, cols] matrix: one scale per
/// blockRows x blockCols block (edge blocks are smaller), e.g. 1 x 128 for
/// activations, 128 x 128 for weights.
void quantizeBlockwise(const float *x, float *out, int64_t rows, int64_t cols,
                       int64_t blockRows, int64_t blockCols, Fp8Format format);

/// Delayed scaling (Transformer Engine's recipe). `amaxes` is one GEMM
/// input's amax history: [0] the largest amax seen in this step so far,
/// [1, length) the amaxes of the last length - 1 steps, newest first. The
/// scale comes from the largest amax of the past steps, not from `x`; a
/// history of zeros (the first step) falls back to x's own amax, so the
/// first step does not run with scale 1. Then x's amax is folded into [0]
/// (a maximum, so calls that see the same tensor twice, such as a backward
/// pass recomputing its input, and several microbatches give one value).
/// Returns x's amax.
float quantizeDelayed(const float *x, float *out, int64_t n, Fp8Format format,
                      float *amaxes, int64_t length);

/// The end of a step for one amax history (see quantizeDelayed): this
/// step's amax becomes the newest past one, the oldest drops out, and [0]
/// starts again from zero.
void rollAmaxHistory(float *amaxes, int64_t length);

/// FP8 rows on the wire (FP8 token dispatch): a row of n floats becomes n
/// codes, four to a 32-bit word, followed by one scale per `block`
/// elements (as fp32 bits): packedFp8Words(n, block) words in all.
int64_t packedFp8Words(int64_t n, int64_t block);
/// Packs `row` blockwise (each block's amax onto the largest value,
/// saturating) into `words`.
void packFp8Row(const float *row, int64_t n, int64_t block, Fp8Format format,
                int32_t *words);
/// The values packFp8Row packed: each code's value over its block's scale.
void unpackFp8Row(const int32_t *words, int64_t n, int64_t block,
                  Fp8Format format, float *row);

} // namespace moe::rt::cpu

#endif // MOE_RUNTIME_CPU_FP8_H
