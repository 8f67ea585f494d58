//===- VirtualSimt.h - the Simt of a kernel on the virtual GPU --*- C++ -*-===//
//
// What DeviceSimt.cuh gives kernel bodies written against a Simt
// (FlashAttentionBlocks.h, WeightGradBlocks.h, Fp8BlockScaling.h,
// Fp8RowBlocks.h) on the device, for the thread engine: indices, shared
// memory, barriers and shuffles through the kernel shim, and WMMA's BF16
// fragments. A 16x16 fragment is spread over the warp as on the device:
// each lane holds 8 of its elements (lane l: row l / 2, columns 8 (l % 2)
// to 8 (l % 2) + 7 of the tile; the hardware's own layout differs, and the
// bodies touch fragments only through whole-tile operations and
// element-wise loops over num_elements). Loads, stores and mma are
// warp-collective, as WMMA's are: every lane must arrive (a divergent one
// is a fault); mma trades the operands through the warp's scratch. Each
// lane stores its own elements, and lanes run on in a random order after
// the collective, so a lane that reads a stored tile without __syncwarp()
// first may see what was there before.
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
#include <utility>

namespace moe::rt::cuda {

struct DeviceSimt {
  unsigned char *sharedMemory;

  /// A lane's 8 elements of a 16x16 tile.
  template <typename T> struct Tile {
    static constexpr int num_elements = 8;
    T x[8];
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
    loadRows(f, p, ld);
  }
  /// B operand (k, n) at p[k * ld + n] (row-major) or p[n * ld + k].
  void load(FragBRow &f, const uint16_t *p, unsigned ld) const {
    loadRows(f, p, ld);
  }
  void load(FragBCol &f, const uint16_t *p, unsigned ld) const {
    __syncwarp();
    auto [row, column] = firstElement();
    for (int i = 0; i < 8; ++i)
      f.x[i] = p[(column + i) * ld + row];
  }
  void loadAcc(FragC &f, const float *p, unsigned ld) const {
    loadRows(f, p, ld);
  }
  void storeAcc(float *p, const FragC &f, unsigned ld) const {
    __syncwarp();
    auto [row, column] = firstElement();
    for (int i = 0; i < 8; ++i)
      p[row * ld + column + i] = f.x[i];
  }
  void zero(FragC &f) const {
    for (float &x : f.x)
      x = 0.0f;
  }
  void scale(FragC &f, float factor) const {
    for (float &x : f.x)
      x *= factor;
  }
  /// c += a b over the warp: every lane puts its elements of a and b in
  /// the warp's scratch, then computes its own elements of c from them.
  template <typename FragB>
  void mma(FragC &c, const FragA &a, const FragB &b) const {
    auto *tiles = static_cast<uint16_t *>(
        ::moe::rt::virtual_gpu::warpScratch(2 * 256 * sizeof(uint16_t)));
    uint16_t *aTile = tiles, *bTile = tiles + 256;
    int lane = ::moe::rt::virtual_gpu::currentLane();
    __syncwarp();
    for (int i = 0; i < 8; ++i) {
      aTile[lane * 8 + i] = a.x[i];
      bTile[lane * 8 + i] = b.x[i];
    }
    __syncwarp();
    auto [row, column] = firstElement();
    for (int i = 0; i < 8; ++i) {
      float sum = c.x[i];
      for (int k = 0; k < 16; ++k)
        sum += fromBf16(aTile[row * 16 + k]) *
               fromBf16(bTile[k * 16 + column + i]);
      c.x[i] = sum;
    }
    // No lane may refill the scratch before every lane has read it.
    __syncwarp();
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
  /// The tile position of the calling lane's first element.
  static std::pair<int, int> firstElement() {
    int lane = ::moe::rt::virtual_gpu::currentLane();
    return {lane / 2, lane % 2 * 8};
  }
  template <typename Fragment, typename T>
  static void loadRows(Fragment &f, const T *p, unsigned ld) {
    __syncwarp();
    auto [row, column] = firstElement();
    for (int i = 0; i < 8; ++i)
      f.x[i] = p[row * ld + column + i];
  }
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_VIRTUALSIMT_H
