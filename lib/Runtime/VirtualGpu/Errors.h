//===- Errors.h - how the virtual GPU's CUDA calls report errors -*- C++ -*-===//
//
// Private to the CUDA runtime subset of lib/Runtime/VirtualGpu (Runtime.cpp
// keeps the state): every cuda* function starts with checkCall() and ends a
// failure with failed(), so errors behave as the runtime documents them. A
// call's error becomes the calling host thread's last error
// (cudaGetLastError); a fault inside work on a stream is sticky and every
// later call returns it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_ERRORS_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_ERRORS_H

#include <cuda_runtime_api.h>

namespace moe::rt::virtual_gpu {

/// Records `code` as the calling thread's last error (cudaSuccess and
/// cudaErrorNotReady, which is a state and not an error, record nothing) and
/// returns it.
cudaError_t failed(cudaError_t code);

/// What a call must return before doing anything: cudaErrorNoDevice when no
/// device is selected, else the sticky error, else cudaSuccess. A failure is
/// recorded as the last error.
cudaError_t checkCall();

/// The sticky error when one is set, else `code`; recorded as failed() does.
/// For calls that must finish their work (a destroy, a free) even after a
/// fault.
cudaError_t stickyOr(cudaError_t code);

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_ERRORS_H
