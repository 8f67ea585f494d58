//===- VirtualSimt.h - the Simt of a kernel on the virtual GPU --*- C++ -*-===//
//
// What DeviceSimt.cuh gives kernel bodies written against a Simt
// (FlashAttentionBlocks.h, WeightGradBlocks.h, Fp8BlockScaling.h,
// Fp8RowBlocks.h) on the device, for the thread engine: indices, shared
// memory, barriers and shuffles through the kernel shim, and WMMA's BF16
// fragments. A fragment holds its whole 16x16 tile in every lane (the
// hardware's layout is its own business: the bodies touch fragments only
// through whole-tile operations). Loads, stores and mma are
// warp-collective, as WMMA's are: every lane must arrive (a divergent one
// is a fault), and a store is made by lane 0 alone, after the others have
// been released in a random order, so a lane that reads the stored tile
// without __syncwarp() first may see what was there before.
//
// The mma accumulates each product in fp32 in k order; tensor cores add in
// an order (and with intermediate precision) of their own, which the
// virtual GPU does not model.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_VIRTUALSIMT_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_VIRTUALSIMT_H

#include "VirtualGpu/KernelShim.h"

#include <cstdint>
#include <cstring>

namespace moe::rt::cuda {

struct DeviceSimt {
  unsigned char *sharedMemory;

  template <typename T> struct Tile {
    static constexpr int num_elements = 256;
    T x[256];
  };
  struct FragA : Tile<uint16_t> {};
  struct FragBRow : Tile<uint16_t> {};
  struct FragBCol : Tile<uint16_t> {};
  struct FragC : Tile<float> {};

  int thread() const { return static_cast<int>(threadIdx.x); }
  int64_t blockX() const { return blockIdx.x; }
  int64_t blockY() const { return blockIdx.y; }
  int64_t blockZ() const { return blockIdx.z; }
  int64_t gridX() const { return gridDim.x; }
  unsigned char *shared() const { return sharedMemory; }
  void syncThreads() const { __syncthreads(); }
  void syncWarp() const { __syncwarp(); }
  float shflXor(float v, int mask) const {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  }
  float shfl(float v, int lane) const {
    return __shfl_sync(0xffffffffu, v, lane);
  }

  /// A operand and accumulators: element (r, c) at p[r * ld + c].
  void load(FragA &f, const uint16_t *p, unsigned ld) const {
    warpCollective();
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        f.x[r * 16 + c] = p[r * ld + c];
  }
  /// B operand (k, n) at p[k * ld + n] (row-major) or p[n * ld + k].
  void load(FragBRow &f, const uint16_t *p, unsigned ld) const {
    warpCollective();
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n)
        f.x[k * 16 + n] = p[k * ld + n];
  }
  void load(FragBCol &f, const uint16_t *p, unsigned ld) const {
    warpCollective();
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n)
        f.x[k * 16 + n] = p[n * ld + k];
  }
  void loadAcc(FragC &f, const float *p, unsigned ld) const {
    warpCollective();
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        f.x[r * 16 + c] = p[r * ld + c];
  }
  void storeAcc(float *p, const FragC &f, unsigned ld) const {
    warpCollective();
    if (::moe::rt::virtual_gpu::currentLane() != 0)
      return;
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        p[r * ld + c] = f.x[r * 16 + c];
  }
  void zero(FragC &f) const {
    for (float &x : f.x)
      x = 0.0f;
  }
  void scale(FragC &f, float factor) const {
    for (float &x : f.x)
      x *= factor;
  }
  template <typename FragB>
  void mma(FragC &c, const FragA &a, const FragB &b) const {
    warpCollective();
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float sum = c.x[m * 16 + n];
        for (int k = 0; k < 16; ++k)
          sum += fromBf16(a.x[m * 16 + k]) * fromBf16(b.x[k * 16 + n]);
        c.x[m * 16 + n] = sum;
      }
  }

  float value(const float *p) const { return *p; }
  float value(const uint16_t *p) const { return fromBf16(*p); }
  uint16_t toBf16(float x) const {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  float fromBf16(uint16_t bits) const {
    return __uint_as_float(uint32_t{bits} << 16);
  }
  /// FP8 codes (format 0: E4M3, 1: E5M2), as the FP8 casts round them.
  uint8_t encodeFp8(float value, int format) const {
    return __nv_cvt_float_to_fp8(value, __NV_SATFINITE,
                                 format == 0 ? __NV_E4M3 : __NV_E5M2);
  }
  float decodeFp8(uint8_t code, int format) const {
    __half_raw half =
        __nv_cvt_fp8_to_halfraw(code, format == 0 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(half));
  }
  /// A 16-byte vector copy: both pointers must be 16-byte aligned, as the
  /// device's uint4 access needs (misaligned, it faults).
  void copy16(uint16_t *to, const uint16_t *from) const {
    if (reinterpret_cast<uintptr_t>(to) % 16 ||
        reinterpret_cast<uintptr_t>(from) % 16)
      __trap();
    std::memcpy(to, from, 16);
  }

private:
  /// Every lane of the warp takes part (WMMA's operations are warp-wide).
  void warpCollective() const { __syncwarp(); }
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_VIRTUALSIMT_H
