//===- FirstBadId.cuh - the least position of a bad id ----------*- CUDA -*-===//
//
// Private to the CUDA backend's kernels: ids checked by many threads at once
// (the embedding's tokens, the losses' targets) report the least position
// of a bad one, whatever the order the threads run in. The position starts
// as kNoBadId (startFirstBad), every thread that sees a bad id keeps the
// least with atomicMin (noteBadId), and finishFirstBad turns kNoBadId into
// -1, so the caller reads an int64_t: -1, or the position.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_FIRSTBADID_CUH
#define MOE_LIB_RUNTIME_CUDA_FIRSTBADID_CUH

#include <cstdint>

namespace moe::rt::cuda {

/// No bad id seen yet (any position is smaller).
inline constexpr unsigned long long kNoBadId = ~0ull;

__device__ inline void noteBadId(unsigned long long *firstBad,
                                 int64_t position) {
  atomicMin(firstBad, static_cast<unsigned long long>(position));
}

/// Launched on one block of one thread; internal to each file that
/// includes them.
static __global__ void startFirstBadKernel(unsigned long long *firstBad) {
  *firstBad = kNoBadId;
}
static __global__ void finishFirstBadKernel(unsigned long long *firstBad) {
  if (*firstBad == kNoBadId)
    *reinterpret_cast<int64_t *>(firstBad) = -1;
}

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_FIRSTBADID_CUH
