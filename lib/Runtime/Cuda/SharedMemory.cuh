//===- SharedMemory.cuh - a block's shared memory, declared once -*- CUDA -*-===//
//
// Private to the CUDA backend's kernels. Shared memory is declared through
// these two macros instead of `__shared__`, so that the virtual GPU
// (lib/Runtime/VirtualGpu) can give each block its own copy, poisoned when
// the block starts and checked against the device's limit, as a GPU would
// leave it undefined:
//
//   MOE_BLOCK_SHARED(double, partial, kThreads);  // __shared__ double partial[kThreads]
//   MOE_DYNAMIC_SHARED(unsigned char, smem, 128); // extern __shared__ __align__(128) unsigned char smem[]
//
// On the virtual GPU the name is a pointer to the block's storage rather
// than an array: use it as one, never with sizeof.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_SHAREDMEMORY_CUH
#define MOE_LIB_RUNTIME_CUDA_SHAREDMEMORY_CUH

#ifdef MOE_VIRTUAL_GPU
#include "VirtualGpu/ThreadEngine.h"

#define MOE_BLOCK_SHARED_ALIGNED(type, name, count, alignment)                \
  static const char moe_shared_site_##name = 0;                               \
  type *const name = static_cast<type *>(                                     \
      ::moe::rt::virtual_gpu::blockShared(&moe_shared_site_##name,            \
                                          sizeof(type) * (count),             \
                                          alignment))
#define MOE_DYNAMIC_SHARED(type, name, alignment)                             \
  type *const name = static_cast<type *>(                                     \
      ::moe::rt::virtual_gpu::dynamicShared(alignment))
#else
#define MOE_BLOCK_SHARED_ALIGNED(type, name, count, alignment)                \
  __shared__ __align__(alignment) type name[count]
#define MOE_DYNAMIC_SHARED(type, name, alignment)                             \
  extern __shared__ __align__(alignment) type name[]
#endif

#define MOE_BLOCK_SHARED(type, name, count)                                   \
  MOE_BLOCK_SHARED_ALIGNED(type, name, count, alignof(type))

#endif // MOE_LIB_RUNTIME_CUDA_SHAREDMEMORY_CUH
