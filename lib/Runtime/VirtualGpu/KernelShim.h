//===- KernelShim.h - CUDA kernel sources as host C++ -----------*- C++ -*-===//
//
// Included before each of lib/Runtime/Cuda's .cu files when the virtual GPU
// builds them with the host compiler (see CMakeLists.txt). It gives the
// CUDA C++ a kernel body uses a host meaning on the thread engine
// (ThreadEngine.h): the thread and block indices of the fiber running,
// __syncthreads, warp shuffles, votes and __syncwarp as checked
// collectives, atomics as real atomics (blocks of kernels on different
// streams run on different OS threads), and the round-to-nearest intrinsics
// as the IEEE operations they are. The CUDA headers' own host paths serve
// BF16, FP16 and FP8 conversions.
//
// What it does not give: the GPU's math library (expf, ... are the host's,
// within a few ulps of the device's), and `__shared__`, which kernels
// declare through SharedMemory.cuh so that each block gets poisoned
// storage of its own; a bare `__shared__` does not compile here.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_KERNELSHIM_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_KERNELSHIM_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "VirtualGpu/ThreadEngine.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ use_SharedMemory_cuh_to_declare_shared_memory

#define threadIdx (::moe::rt::virtual_gpu::currentThread().threadIdx)
#define blockIdx (::moe::rt::virtual_gpu::currentThread().blockIdx)
#define blockDim (::moe::rt::virtual_gpu::currentThread().blockDim)
#define gridDim (::moe::rt::virtual_gpu::currentThread().gridDim)
// warpSize is device_launch_parameters.h's `extern const int`, defined in
// ThreadEngine.cpp.

namespace moe::rt::virtual_gpu::shim {

template <typename T> uint64_t toBits(T value) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>,
                "a shuffled value fits in 64 bits");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <typename T> T fromBits(uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}
/// A parameter that does not take part in deduction: `atomicAdd(p, 1)`
/// adds to an unsigned counter as it does on the device.
template <typename T> struct Identity {
  using type = T;
};
template <typename T> using Same = typename Identity<T>::type;

/// The first lane of the calling lane's `width`-lane segment.
inline int segmentBase(int width) { return currentLane() / width * width; }

/// Atomics: a compare-and-swap loop for the floating-point ones.
template <typename T, typename Update> T atomicUpdate(T *address, Update update) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &old, update(old), false,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T, typename Update>
T atomicUpdateFloat(T *address, Update update) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  auto *word = reinterpret_cast<Bits *>(address);
  Bits old = __atomic_load_n(word, __ATOMIC_RELAXED);
  while (true) {
    T before;
    std::memcpy(&before, &old, sizeof(T));
    T after = update(before);
    Bits next;
    std::memcpy(&next, &after, sizeof(T));
    if (__atomic_compare_exchange_n(word, &old, next, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return before;
  }
}

} // namespace moe::rt::virtual_gpu::shim

inline void __syncthreads() { ::moe::rt::virtual_gpu::syncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::moe::rt::virtual_gpu::syncWarp(mask);
}
/// A kernel's trap: the launch faults (cudaErrorLaunchFailure).
[[noreturn]] inline void __trap() {
  ::moe::rt::virtual_gpu::trapFromThread("__trap()");
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <typename T>
T __shfl_sync(unsigned mask, T value, int sourceLane, int width = 32) {
  namespace shim = ::moe::rt::virtual_gpu::shim;
  int source = shim::segmentBase(width) + ((sourceLane % width) + width) % width;
  return shim::fromBits<T>(::moe::rt::virtual_gpu::shuffleIndexed(
      mask, shim::toBits(value), source, width, "__shfl_sync"));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int laneMask, int width = 32) {
  namespace shim = ::moe::rt::virtual_gpu::shim;
  int lane = ::moe::rt::virtual_gpu::currentLane();
  int source = lane ^ laneMask;
  // A lane past its segment reads its own value (the documented rule).
  if (source >= shim::segmentBase(width) + width)
    source = lane;
  return shim::fromBits<T>(::moe::rt::virtual_gpu::shuffleIndexed(
      mask, shim::toBits(value), source, width, "__shfl_xor_sync"));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  namespace shim = ::moe::rt::virtual_gpu::shim;
  int lane = ::moe::rt::virtual_gpu::currentLane();
  int source = lane + static_cast<int>(delta);
  if (source >= shim::segmentBase(width) + width)
    source = lane;
  return shim::fromBits<T>(::moe::rt::virtual_gpu::shuffleIndexed(
      mask, shim::toBits(value), source, width, "__shfl_down_sync"));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  namespace shim = ::moe::rt::virtual_gpu::shim;
  int lane = ::moe::rt::virtual_gpu::currentLane();
  int source = lane - static_cast<int>(delta);
  if (source < shim::segmentBase(width))
    source = lane;
  return shim::fromBits<T>(::moe::rt::virtual_gpu::shuffleIndexed(
      mask, shim::toBits(value), source, width, "__shfl_up_sync"));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::moe::rt::virtual_gpu::ballot(mask, predicate != 0);
}
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == mask;
}

// The device's min and max take mixed integer and floating-point
// arguments, promoted as arithmetic promotes them.
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(b) < static_cast<T>(a) ? static_cast<T>(b)
                                               : static_cast<T>(a);
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(a) < static_cast<T>(b) ? static_cast<T>(b)
                                               : static_cast<T>(a);
}

// cuda_runtime.h's typed overload, which it declares for nvcc only.
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel *kernel, cudaFuncAttribute attribute,
                                 int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel),
                                attribute, value);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }

inline float __uint_as_float(unsigned x) {
  return ::moe::rt::virtual_gpu::shim::fromBits<float>(x);
}
inline unsigned __float_as_uint(float x) {
  return static_cast<unsigned>(::moe::rt::virtual_gpu::shim::toBits(x));
}
inline float __int_as_float(int x) {
  return ::moe::rt::virtual_gpu::shim::fromBits<float>(static_cast<unsigned>(x));
}
inline int __float_as_int(float x) {
  return static_cast<int>(::moe::rt::virtual_gpu::shim::toBits(x));
}

// Round to nearest even: the host's IEEE operations (SSE, no contraction).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

template <typename T>
T atomicAdd(T *address, ::moe::rt::virtual_gpu::shim::Same<T> value) {
  namespace shim = ::moe::rt::virtual_gpu::shim;
  if constexpr (std::is_floating_point_v<T>)
    return shim::atomicUpdateFloat(address, [&](T old) { return old + value; });
  else
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
template <typename T>
T atomicSub(T *address, ::moe::rt::virtual_gpu::shim::Same<T> value) {
  return __atomic_fetch_sub(address, value, __ATOMIC_RELAXED);
}
template <typename T>
T atomicMin(T *address, ::moe::rt::virtual_gpu::shim::Same<T> value) {
  return ::moe::rt::virtual_gpu::shim::atomicUpdate(
      address, [&](T old) { return value < old ? value : old; });
}
template <typename T>
T atomicMax(T *address, ::moe::rt::virtual_gpu::shim::Same<T> value) {
  return ::moe::rt::virtual_gpu::shim::atomicUpdate(
      address, [&](T old) { return value > old ? value : old; });
}
template <typename T>
T atomicExch(T *address, ::moe::rt::virtual_gpu::shim::Same<T> value) {
  return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
template <typename T>
T atomicCAS(T *address, ::moe::rt::virtual_gpu::shim::Same<T> compare,
            ::moe::rt::virtual_gpu::shim::Same<T> value) {
  __atomic_compare_exchange_n(address, &compare, value, false,
                              __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_KERNELSHIM_H
