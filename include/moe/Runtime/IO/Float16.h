//===- Float16.h - bfloat16 and IEEE half conversions -----------*- C++ -*-===//
//
// Bit-exact conversions between fp32 and the two 16-bit float formats found
// in HF checkpoints. Decoding is exact; encoding rounds to nearest even and
// keeps NaNs quiet.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_FLOAT16_H
#define MOE_RUNTIME_IO_FLOAT16_H

#include <cstdint>

namespace moe::rt::io {

float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);

float f16ToFloat(uint16_t bits);
uint16_t floatToF16(float value);

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_FLOAT16_H
