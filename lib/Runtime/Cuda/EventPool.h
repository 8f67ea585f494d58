//===- EventPool.h - timing events, made once and reused --------*- C++ -*-===//
//
// Private to the CUDA backend: events taken per use and given back once
// read (the timing events of --profile and --trace, the collectives'
// completion markers), so that a step creates none after the first.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_EVENTPOOL_H
#define MOE_LIB_RUNTIME_CUDA_EVENTPOOL_H

#include "CudaStatus.h"

#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>

#include <vector>

namespace moe::rt::cuda {

class EventPool {
public:
  /// Events of `flags` (timing events by default; completion markers pass
  /// cudaEventDisableTiming).
  explicit EventPool(unsigned flags = cudaEventDefault) : flags(flags) {}
  ~EventPool() {
    for (cudaEvent_t e : free)
      cudaEventDestroy(e);
  }
  EventPool(const EventPool &) = delete;
  EventPool &operator=(const EventPool &) = delete;

  absl::StatusOr<cudaEvent_t> take() {
    if (!free.empty()) {
      cudaEvent_t e = free.back();
      free.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    MOE_CUDA_OK(cudaEventCreateWithFlags(&e, flags));
    return e;
  }
  /// Back to the pool (it owns it again; null is ignored).
  void give(cudaEvent_t e) {
    if (e)
      free.push_back(e);
  }

private:
  unsigned flags;
  std::vector<cudaEvent_t> free;
};

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_EVENTPOOL_H
