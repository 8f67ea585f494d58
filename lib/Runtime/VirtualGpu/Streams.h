//===- Streams.h - the virtual GPU's stream scheduler -----------*- C++ -*-===//
//
// Private to the CUDA runtime subset of lib/Runtime/VirtualGpu: what the
// events, memory and copy calls need of the streams (Streams.cpp). Every
// item of work on a stream has a marker that completes when the item has
// run; events hold the marker of their latest record, and a stream told to
// wait for an event waits for that marker.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_STREAMS_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_STREAMS_H

#include "VirtualGpu/Runtime.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt::virtual_gpu {

struct Stream;

/// The completion of one item of work on a stream. Only the scheduler
/// reads or writes it (under its lock), through the functions below.
struct Marker {
  /// The stream the item is on, while the item has not run.
  Stream *stream;
  /// The item's place in its stream: 1 for the first item.
  uint64_t sequence;
  bool done = false;
  /// When the item finished running (host clock): event timing.
  std::chrono::steady_clock::time_point doneAt;
};
using MarkerPtr = std::shared_ptr<Marker>;

/// enqueue() that also waits for `waitFor` before running `work`, and
/// returns the new item's marker in `done` (when not null).
cudaError_t enqueueAfter(cudaStream_t stream, std::string what, Work work,
                         std::vector<MarkerPtr> waitFor, MarkerPtr *done);

/// Whether `marker` has run (a null marker has). Asking is a demand: a
/// communication stream runs the work up to it now (a poll must progress).
bool pollDone(const MarkerPtr &marker);
/// When a done marker ran.
std::chrono::steady_clock::time_point doneAt(const MarkerPtr &marker);
/// Blocks the calling host thread until `marker` has run; a communication
/// stream runs the work up to it now, since someone waits for it.
void waitFor(const MarkerPtr &marker);

/// Whether `stream` names a live stream (nullptr and cudaStreamLegacy: the
/// legacy default stream).
bool isStream(cudaStream_t stream);
/// The one handle of `stream`: nullptr for both spellings of the legacy
/// default stream.
inline cudaStream_t canonicalStream(cudaStream_t stream) {
  return stream == cudaStreamLegacy ? nullptr : stream;
}
/// "stream 0x...", or "the legacy default stream", for messages.
std::string describeStream(cudaStream_t stream);

/// Blocks until all work enqueued on every stream so far has run.
void synchronizeAllStreams();

/// Wakes every worker to look at the state again (a fault was set).
void notifyStreams();

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_STREAMS_H
