//===- Storage.cuh - a kernel's element type in memory ---------*- CUDA -*-===//
//
// Private to the CUDA backend's kernels. Activations are stored as float or,
// under mixed precision, as BF16 bits (uint16_t); kernels templated on the
// storage type compute in fp32 either way: a BF16 element widens exactly and
// a result rounds once, to nearest even. That is what the CPU's BF16 kernels
// do (decode, compute in fp32, round once), so a BF16 kernel gives the bits
// of the fp32 kernel run on widened copies, without the copies.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_STORAGE_CUH
#define MOE_LIB_RUNTIME_CUDA_STORAGE_CUH

#include <cuda_bf16.h>

#include <cstdint>

namespace moe::rt::cuda {

__device__ __forceinline__ float loadValue(const float *p) { return *p; }
__device__ __forceinline__ float loadValue(const uint16_t *p) {
  return __uint_as_float(uint32_t{*p} << 16);
}
__device__ __forceinline__ void storeValue(float *p, float value) {
  *p = value;
}
__device__ __forceinline__ void storeValue(uint16_t *p, float value) {
  *p = __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_STORAGE_CUH
