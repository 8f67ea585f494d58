//===- Copies.cpp - the virtual GPU's memory copies and sets --------------===//
//
// cudaMemcpy*, cudaMemset*: the call checks what it can (the direction,
// the pitches, that each device side lies in an allocation the host holds,
// that a side the kind calls host memory is not device memory) and answers
// cudaErrorInvalidValue at once; the work, in stream order, checks the
// device sides again against the live allocations (freed since, not yet
// allocated on this stream) and faults when they are not, and a pinned host
// side against cudaFreeHost.
//
// When a call returns, per the runtime's "API synchronization behavior"
// (cuda_runtime_api.h, \page sync_async), by whether a host side is pinned
// (cudaMallocHost, cudaHostAlloc: PinnedMemory.cpp) or pageable:
//  * from pageable host memory to the device, the call stages the source
//    and returns ("The function will return once the pageable buffer has
//    been copied to the staging memory for DMA transfer"; the asynchronous
//    form "may synchronize with the stream and stage the copy into pinned
//    memory"): the caller may reuse it at once;
//  * from pinned host memory to the device, the work reads the source when
//    it runs; cudaMemcpy waits for it ("synchronous with respect to the
//    host"), the asynchronous forms do not;
//  * from the device to host memory, cudaMemcpy "returns only once the copy
//    has completed"; the asynchronous forms into pinned memory return at
//    once ("For all other transfers, the function should be fully
//    asynchronous"), and into pageable memory wait for the copy, which the
//    runtime permits ("For transfers between device memory and pageable
//    host memory, the function might be synchronous with respect to host")
//    and drivers do (the copy lands in their own staging buffer first): a host
//    that reads the device through pageable memory blocks until the stream
//    reaches the copy, behind whatever the stream waits for (a collective whose
//    peer hangs), so it must not do that where it means to poll;
//  * from host memory to host memory, every form waits ("fully synchronous
//    with respect to the host");
//  * device to device, no form waits.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Memory.h"
#include "VirtualGpu/Streams.h"

#include <cstring>
#include <memory>
#include <vector>

namespace moe::rt::virtual_gpu {
namespace {

/// A rectangle of bytes: `height` rows of `width` bytes, `pitch` apart.
struct Rows {
  size_t pitch, width, height;
  /// The bytes from the first row's start to the last row's end.
  size_t extent() const { return pitch * (height - 1) + width; }
};

/// Checks one side of a copy or set at the call.
cudaError_t checkSide(const void *p, const Rows &rows, bool device) {
  if (!p)
    return cudaErrorInvalidValue;
  if (device)
    return checkAllocated(p, rows.extent());
  return isDeviceAddress(p) ? cudaErrorInvalidValue : cudaSuccess;
}

/// Faults when a device side is no longer (or not yet) live when the work
/// runs; returns whether it is.
bool liveWhenRun(const void *p, const Rows &rows, const char *what) {
  absl::Status status = checkDeviceRange(p, rows.extent(), what);
  if (status.ok())
    return true;
  fault(cudaErrorIllegalAddress, std::string(status.message()));
  return false;
}

void copyRows(uint8_t *to, const Rows &toRows, const uint8_t *from,
              const Rows &fromRows) {
  for (size_t row = 0; row < toRows.height; ++row)
    std::memcpy(to + row * toRows.pitch, from + row * fromRows.pitch,
                toRows.width);
}

/// The runtime's two forms of a copy, which synchronise differently.
enum class CopyForm { Synchronous, Asynchronous };

cudaError_t enqueueCopy(const char *what, void *dst, size_t dpitch,
                        const void *src, size_t spitch, size_t width,
                        size_t height, cudaMemcpyKind kind, cudaStream_t stream,
                        CopyForm form) {
  if (cudaError_t error = checkCall())
    return error;
  if (width == 0 || height == 0)
    return cudaSuccess;
  if (width > dpitch || width > spitch)
    return failed(cudaErrorInvalidPitchValue);
  bool dstDevice, srcDevice;
  switch (kind) {
  case cudaMemcpyHostToHost:
    dstDevice = srcDevice = false;
    break;
  case cudaMemcpyHostToDevice:
    dstDevice = true, srcDevice = false;
    break;
  case cudaMemcpyDeviceToHost:
    dstDevice = false, srcDevice = true;
    break;
  case cudaMemcpyDeviceToDevice:
    dstDevice = srcDevice = true;
    break;
  case cudaMemcpyDefault:
    dstDevice = isDeviceAddress(dst);
    srcDevice = isDeviceAddress(src);
    break;
  default:
    return failed(cudaErrorInvalidMemcpyDirection);
  }
  Rows dstRows{dpitch, width, height}, srcRows{spitch, width, height};
  if (cudaError_t error = checkSide(dst, dstRows, dstDevice))
    return failed(error);
  if (cudaError_t error = checkSide(src, srcRows, srcDevice))
    return failed(error);
  // Overlapping copies are undefined.
  auto *to = static_cast<uint8_t *>(dst);
  auto *from = static_cast<const uint8_t *>(src);
  if (to < from + srcRows.extent() && from < to + dstRows.extent())
    return failed(cudaErrorInvalidValue);
  std::shared_ptr<PinnedAllocation> dstPinned =
      dstDevice ? nullptr : findPinned(dst, dstRows.extent());
  std::shared_ptr<PinnedAllocation> srcPinned =
      srcDevice ? nullptr : findPinned(src, srcRows.extent());
  std::shared_ptr<std::vector<uint8_t>> staged;
  if (!srcDevice && dstDevice && !srcPinned) {
    staged = std::make_shared<std::vector<uint8_t>>(width * height);
    copyRows(staged->data(), Rows{width, width, height}, from, srcRows);
    from = staged->data();
    srcRows.pitch = width;
  }
  MarkerPtr done;
  cudaError_t enqueued = enqueueAfter(
      stream, what,
      // The staged copy and the pinned allocations live as long as the
      // work.
      [=, staged = std::move(staged)] {
        if (dstDevice && !liveWhenRun(to, dstRows, what))
          return;
        if (srcDevice && !liveWhenRun(from, srcRows, what))
          return;
        if (dstPinned && !pinnedWhenRun(*dstPinned, to, what))
          return;
        if (srcPinned && !pinnedWhenRun(*srcPinned, from, what))
          return;
        copyRows(to, dstRows, from, srcRows);
      },
      {}, &done);
  if (enqueued != cudaSuccess)
    return failed(enqueued);
  // When the call returns (the file's comment cites the runtime's words).
  bool waits;
  if (!dstDevice)
    waits = !srcDevice || form == CopyForm::Synchronous || !dstPinned;
  else
    waits = !srcDevice && srcPinned && form == CopyForm::Synchronous;
  if (!waits)
    return form == CopyForm::Synchronous ? stickyOr(cudaSuccess) : cudaSuccess;
  // A communication stream runs the work up to the copy now, since the
  // host waits for it.
  waitFor(done);
  return stickyOr(cudaSuccess);
}

cudaError_t enqueueSet(const char *what, void *devPtr, size_t pitch,
                       int value, size_t width, size_t height,
                       cudaStream_t stream) {
  if (cudaError_t error = checkCall())
    return error;
  if (width == 0 || height == 0)
    return cudaSuccess;
  if (width > pitch)
    return failed(cudaErrorInvalidPitchValue);
  Rows rows{pitch, width, height};
  if (cudaError_t error = checkSide(devPtr, rows, /*device=*/true))
    return failed(error);
  auto *to = static_cast<uint8_t *>(devPtr);
  return failed(enqueue(stream, what, [=] {
    if (!liveWhenRun(to, rows, what))
      return;
    for (size_t row = 0; row < height; ++row)
      std::memset(to + row * pitch, value, width);
  }));
}

} // namespace
} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       cudaMemcpyKind kind) {
  return enqueueCopy("cudaMemcpy", dst, count, src, count, count, 1, kind,
                     nullptr, CopyForm::Synchronous);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  return enqueueCopy("cudaMemcpyAsync", dst, count, src, count, count, 1, kind,
                     stream, CopyForm::Asynchronous);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  return enqueueCopy("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width,
                     height, kind, stream, CopyForm::Asynchronous);
}

/// Documented: asynchronous with respect to the host for device memory,
/// on the legacy default stream.
cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  return enqueueSet("cudaMemset", devPtr, count, value, count, 1, nullptr);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream) {
  return enqueueSet("cudaMemsetAsync", devPtr, count, value, count, 1,
                    stream);
}

cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value,
                              size_t width, size_t height,
                              cudaStream_t stream) {
  return enqueueSet("cudaMemset2DAsync", devPtr, pitch, value, width, height,
                    stream);
}

} // extern "C"
