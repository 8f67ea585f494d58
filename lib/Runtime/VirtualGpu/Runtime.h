//===- Runtime.h - the virtual GPU's device, streams and memory -*- C++ -*-===//
//
// Private to lib/Runtime/VirtualGpu: what its parts share. The CUDA runtime
// subset implements the functions the backend calls on top of this: errors
// (Runtime.cpp), the device models (DeviceModels.cpp), streams
// (Streams.cpp), events (Events.cpp), memory (Memory.cpp, MemoryPool.cpp,
// PinnedMemory.cpp) and copies (Copies.cpp); the thread engine
// (KernelLaunch.h), cuBLASLt (CublasLt.cpp) and NCCL (Nccl.cpp) put their
// work on streams through enqueue() and check their pointers against the
// live allocations.
//
// The emulation is strict, so that what would go wrong on a device goes
// wrong here, visibly:
//  * each stream is a worker thread that runs its work in order; streams are
//    ordered only by cudaStreamWaitEvent and synchronisation, and the
//    scheduling is adversarial and seeded (MOE_VIRTUAL_GPU_SEED): random
//    delays, communication streams run as late as is legal;
//  * memory from cudaMalloc and cudaMallocAsync starts poisoned (0xff bytes:
//    NaN as fp32 and BF16, -1 as an integer) with a guard band after it;
//    freed memory is poisoned and reused as eagerly as the stream-ordered
//    rules allow;
//  * an error inside work on a stream (a kernel's fault) is sticky, as on
//    the device: every later call returns it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_RUNTIME_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_RUNTIME_H

#include "absl/status/status.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace moe::rt::virtual_gpu {

/// What a named device model has: the properties cudaGetDeviceProperties
/// reports and launches are checked against.
struct DeviceModel {
  /// As --virtual-gpu spells it: "a100", "h100", "h200".
  const char *name;
  /// cudaDeviceProp::name, marked virtual: "NVIDIA H100 80GB HBM3 (virtual)".
  const char *deviceName;
  int major, minor;
  int multiprocessors;
  uint64_t globalMemoryBytes;
  int maxThreadsPerBlock;
  int maxBlockDim[3];
  int maxGridDim[3];
  /// Static plus dynamic shared memory of a block without opting in, and the
  /// most a kernel may opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize).
  size_t sharedBytesPerBlock;
  size_t sharedBytesPerBlockOptin;
  size_t sharedBytesPerMultiprocessor;
  int registersPerBlock;
  int registersPerMultiprocessor;
  int maxThreadsPerMultiprocessor;
  int warpSize;
};

/// The model named `name` ("a100", "h100", "h200"), or nullptr.
const DeviceModel *findDeviceModel(std::string_view name);
/// "a100, h100, h200", for messages.
std::string knownDeviceModels();

/// Chooses the emulated device before the first CUDA call: moe-run's
/// --virtual-gpu NAME, or the environment's MOE_VIRTUAL_GPU=NAME (tests).
/// Without either, cudaGetDeviceCount answers cudaErrorNoDevice, as on a
/// machine without a GPU. An unknown name is an error listing the known.
absl::Status selectDevice(std::string_view name);
/// The emulated device, or nullptr when none is selected.
const DeviceModel *selectedDevice();

/// Work put on a stream. It runs on the stream's worker thread, after all
/// work enqueued earlier on that stream and after the events the stream was
/// told to wait for.
using Work = std::function<void()>;

/// Enqueues `work` on `stream` (nullptr: the legacy default stream, which
/// waits for and is waited on by every blocking stream). `what` names the
/// work in errors and traces. Returns cudaErrorNoDevice when no device is
/// selected, the sticky error if one is set (and then runs nothing),
/// cudaErrorInvalidResourceHandle for a destroyed or unknown stream,
/// cudaErrorCudartUnloading while the process exits, else cudaSuccess. It
/// does not set the last error: the caller decides what the failure is.
cudaError_t enqueue(cudaStream_t stream, std::string what, Work work);

/// Marks `stream` as a communication stream (NCCL's emulation does, for
/// every stream it puts a collective on): its work starts as late as the
/// stream order allows, so a consumer on another stream that does not wait
/// for it reads what was there before.
void markCommunicationStream(cudaStream_t stream);

/// Called from inside work when it fails as a kernel would on a device (a
/// divergent barrier, a launch past a limit found late, an access to freed
/// memory): sets the sticky error `code` and prints "virtual gpu: <message>"
/// once to stderr. Later work on every stream is skipped.
void fault(cudaError_t code, const std::string &message);

/// Sets the error cudaGetLastError / cudaPeekAtLastError report next (a
/// launch refused at the call: cudaErrorInvalidConfiguration, ...). Not
/// sticky.
void setLastError(cudaError_t code);

/// The sticky error, or cudaSuccess.
cudaError_t stickyError();

/// OK when [p, p + bytes) lies inside one live device allocation (from
/// cudaMalloc or cudaMallocAsync, not yet freed in stream order); else an
/// error naming `what`, the address and why: freed (and where), past the
/// end of an allocation (its size), or not device memory at all.
absl::Status checkDeviceRange(const void *p, size_t bytes, const char *what);

/// The dynamic shared memory `kernel` may use: sharedBytesPerBlock unless
/// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize)
/// raised it.
size_t dynamicSharedLimit(const void *kernel);

/// 64 random bits from the run's seeded generator (MOE_VIRTUAL_GPU_SEED,
/// default 1): the adversarial choices. Thread-safe.
uint64_t randomBits();

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_RUNTIME_H
