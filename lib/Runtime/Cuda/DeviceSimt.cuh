//===- DeviceSimt.cuh - the device Simt ------------------------*- CUDA -*-===//
//
// Private to the CUDA backend: what kernel bodies written against a Simt
// (FlashAttentionBlocks.h, WeightGradBlocks.h) call on the device: the
// thread and block indices, dynamic shared memory, barriers, shuffles,
// WMMA's BF16 fragments, BF16 conversions. unittests/Cuda/SimtEmulator.h is
// its host twin.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_DEVICESIMT_CUH
#define MOE_LIB_RUNTIME_CUDA_DEVICESIMT_CUH

#include "Storage.cuh"

#ifdef MOE_VIRTUAL_GPU
// The virtual GPU's twin: the same interface on the thread engine.
#include "VirtualGpu/VirtualSimt.h"
#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <cstdint>

namespace moe::rt::cuda {

namespace wmma = nvcuda::wmma;

struct DeviceSimt {
  unsigned char *sharedMemory;

  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                               wmma::row_major>;
  using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                                  wmma::row_major>;
  using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                                  wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

  __device__ int thread() const { return threadIdx.x; }
  __device__ int64_t blockX() const { return blockIdx.x; }
  __device__ int64_t blockY() const { return blockIdx.y; }
  __device__ int64_t blockZ() const { return blockIdx.z; }
  __device__ int64_t gridX() const { return gridDim.x; }
  __device__ unsigned char *shared() const { return sharedMemory; }
  __device__ void syncThreads() const { __syncthreads(); }
  __device__ void syncWarp() const { __syncwarp(); }
  __device__ float shflXor(float v, int mask) const {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  }
  __device__ float shfl(float v, int lane) const {
    return __shfl_sync(0xffffffffu, v, lane);
  }

  template <typename Frag>
  __device__ void load(Frag &frag, const uint16_t *p, unsigned ld) const {
    wmma::load_matrix_sync(frag, reinterpret_cast<const __nv_bfloat16 *>(p),
                           ld);
  }
  __device__ void loadAcc(FragC &frag, const float *p, unsigned ld) const {
    wmma::load_matrix_sync(frag, p, ld, wmma::mem_row_major);
  }
  __device__ void storeAcc(float *p, const FragC &frag, unsigned ld) const {
    wmma::store_matrix_sync(p, frag, ld, wmma::mem_row_major);
  }
  __device__ void zero(FragC &frag) const { wmma::fill_fragment(frag, 0.0f); }
  __device__ void scale(FragC &frag, float factor) const {
#pragma unroll
    for (int i = 0; i < frag.num_elements; ++i)
      frag.x[i] *= factor;
  }
  template <typename FragB>
  __device__ void mma(FragC &c, const FragA &a, const FragB &b) const {
    wmma::mma_sync(c, a, b, c);
  }

  /// An element of float or BF16 (bits) storage, as fp32.
  __device__ float value(const float *p) const { return loadValue(p); }
  __device__ float value(const uint16_t *p) const { return loadValue(p); }
  __device__ uint16_t toBf16(float x) const {
    uint16_t bits;
    storeValue(&bits, x);
    return bits;
  }
  __device__ float fromBf16(uint16_t bits) const { return loadValue(&bits); }
  /// FP8 codes (format 0: E4M3, 1: E5M2), as the FP8 casts round them.
  __device__ uint8_t encodeFp8(float value, int format) const {
    return __nv_cvt_float_to_fp8(value, __NV_SATFINITE,
                                 format == 0 ? __NV_E4M3 : __NV_E5M2);
  }
  __device__ float decodeFp8(uint8_t code, int format) const {
    __half_raw half =
        __nv_cvt_fp8_to_halfraw(code, format == 0 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(half));
  }
  __device__ void copy16(uint16_t *to, const uint16_t *from) const {
    *reinterpret_cast<uint4 *>(to) = *reinterpret_cast<const uint4 *>(from);
  }
};

} // namespace moe::rt::cuda

#endif // MOE_VIRTUAL_GPU
#endif // MOE_LIB_RUNTIME_CUDA_DEVICESIMT_CUH
