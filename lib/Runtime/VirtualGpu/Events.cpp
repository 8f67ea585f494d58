//===- Events.cpp - the virtual GPU's events ------------------------------===//
//
// An event is the marker of its most recent record (Streams.h): recording
// enqueues an empty item on the stream, and the event is complete once that
// item has run (never recorded: complete). A stream told to wait for an
// event waits for the record that was most recent at the call; records made
// later do not move the wait. Timing is the host clock when the markers ran.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Streams.h"

#include <map>
#include <mutex>

namespace moe::rt::virtual_gpu {
namespace {

struct Event {
  unsigned flags;
  /// The marker of the most recent record, or null.
  MarkerPtr recorded;
};

struct Events {
  std::mutex mutex;
  std::map<cudaEvent_t, Event> live;
  uint64_t created = 0;
};

Events &events() {
  static Events *instance = new Events;
  return *instance;
}

/// The event's flags and latest record, or cudaErrorInvalidResourceHandle
/// for a handle that is not a live event.
cudaError_t lookUp(cudaEvent_t handle, Event *event) {
  Events &e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.live.find(handle);
  if (it == e.live.end())
    return cudaErrorInvalidResourceHandle;
  *event = it->second;
  return cudaSuccess;
}

} // namespace
} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  if (cudaError_t error = checkCall())
    return error;
  if (!event ||
      (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming |
                 cudaEventInterprocess)) != 0)
    return failed(cudaErrorInvalidValue);
  // Events shared between processes are not emulated.
  if (flags & cudaEventInterprocess)
    return failed(cudaErrorNotSupported);
  Events &e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  // Handles are never reused and point at nothing.
  auto handle = reinterpret_cast<cudaEvent_t>(uintptr_t{0xe7000000} +
                                              0x10 * ++e.created);
  e.live[handle] = Event{flags, nullptr};
  *event = handle;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  if (!selectedDevice())
    return failed(cudaErrorNoDevice);
  Events &e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  // A pending record still runs; only the handle goes.
  if (e.live.erase(handle) == 0)
    return failed(cudaErrorInvalidResourceHandle);
  return stickyOr(cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream) {
  if (cudaError_t error = checkCall())
    return error;
  Event event;
  if (cudaError_t error = lookUp(handle, &event))
    return failed(error);
  MarkerPtr marker;
  if (cudaError_t error =
          enqueueAfter(stream, "cudaEventRecord", [] {}, {}, &marker))
    return failed(error);
  Events &e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.live.find(handle);
  if (it == e.live.end())
    return failed(cudaErrorInvalidResourceHandle);
  it->second.recorded = marker;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t handle) {
  if (cudaError_t error = checkCall())
    return error;
  Event event;
  if (cudaError_t error = lookUp(handle, &event))
    return failed(error);
  return pollDone(event.recorded) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  if (cudaError_t error = checkCall())
    return error;
  Event event;
  if (cudaError_t error = lookUp(handle, &event))
    return failed(error);
  waitFor(event.recorded);
  return stickyOr(cudaSuccess);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  if (cudaError_t error = checkCall())
    return error;
  if (!ms)
    return failed(cudaErrorInvalidValue);
  Event first, last;
  if (cudaError_t error = lookUp(start, &first))
    return failed(error);
  if (cudaError_t error = lookUp(end, &last))
    return failed(error);
  // As documented: events without timing, or never recorded, are not
  // valid here; records that have not run yet are not ready.
  if ((first.flags | last.flags) & cudaEventDisableTiming)
    return failed(cudaErrorInvalidResourceHandle);
  if (!first.recorded || !last.recorded)
    return failed(cudaErrorInvalidResourceHandle);
  if (!pollDone(first.recorded) || !pollDone(last.recorded))
    return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(doneAt(last.recorded) -
                                                 doneAt(first.recorded))
            .count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t handle,
                                unsigned int flags) {
  if (cudaError_t error = checkCall())
    return error;
  if (flags != cudaEventWaitDefault)
    return failed(cudaErrorInvalidValue);
  Event event;
  if (cudaError_t error = lookUp(handle, &event))
    return failed(error);
  // The wait is for the record most recent now; a never-recorded event is
  // complete and orders nothing.
  std::vector<MarkerPtr> waitFor;
  if (event.recorded)
    waitFor.push_back(event.recorded);
  return failed(enqueueAfter(stream, "cudaStreamWaitEvent", [] {},
                             std::move(waitFor), nullptr));
}

} // extern "C"
