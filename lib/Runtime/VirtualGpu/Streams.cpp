//===- Streams.cpp - the virtual GPU's streams and their scheduling -------===//
//
// Each stream is a worker thread that runs its items in order. An item
// starts once the markers it waits for have run: the events the stream was
// told to wait for, and the implicit synchronisation of the legacy default
// stream (its items wait for every blocking stream's earlier work, and a
// blocking stream's items for its earlier work). Nothing else orders
// streams.
//
// The scheduling is adversarial, from the run's seed (MOE_VIRTUAL_GPU_SEED,
// Runtime.cpp): a worker sleeps a random short time (0 to 200 us, most of
// them short) before one item in four, and a communication stream
// (markCommunicationStream) holds each item back until someone needs it:
// a stream or host thread waits for it or for work after it, or polls it
// (cudaStreamQuery, cudaEventQuery). Starting it when the other streams
// merely look idle would race with the host enqueueing their next work;
// waiting for demand is the latest start that is legal, and it makes a
// consumer that forgot to wait read the old data every time. An item
// nobody asks for still starts after kCommunicationCap, so a host that
// waits for its peers by other means (MPI) does not deadlock the job.
//
// At process exit the workers skip what is left and stop, so exit neither
// hangs on pending work nor runs work against destroyed objects.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Memory.h"
#include "VirtualGpu/Streams.h"

#include "absl/strings/str_format.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace moe::rt::virtual_gpu {

/// How long a communication stream holds back a ready item nobody asks for.
constexpr std::chrono::milliseconds kCommunicationCap{100};
/// The longest random delay before an item.
constexpr double kMaxDelayMicroseconds = 200;

struct Item {
  std::string what;
  Work work;
  std::vector<MarkerPtr> waitFor;
  MarkerPtr done;
};

struct Stream {
  cudaStream_t handle;
  bool legacy = false;
  /// Synchronises with the legacy default stream (not cudaStreamNonBlocking).
  bool blocking = true;
  bool communication = false;
  /// Set by cudaStreamDestroy: the worker stops once the queue is empty.
  bool destroyed = false;
  std::deque<Item> queue;
  uint64_t nextSequence = 1;
  /// The marker of the last item enqueued, or null.
  MarkerPtr last;
  /// Someone waits for the items up to this sequence number.
  uint64_t demandedThrough = 0;
  /// This stream's delays, seeded from the run's generator.
  std::mt19937_64 delays;
};

namespace {

struct Scheduler {
  std::mutex mutex;
  std::condition_variable changed;
  /// The live streams by handle; the legacy default stream under nullptr.
  std::map<cudaStream_t, std::shared_ptr<Stream>> streams;
  uint64_t streamsCreated = 0;
  int runningWorkers = 0;
  bool shuttingDown = false;
};

/// Never destroyed: workers may still use it while the process exits.
Scheduler &scheduler() {
  static Scheduler *instance = new Scheduler;
  return *instance;
}

bool legacyHandle(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy;
}

/// Asks for the work up to `marker` to run now. Caller holds the lock.
void demand(Scheduler &s, Marker &marker) {
  if (marker.done || marker.stream->demandedThrough >= marker.sequence)
    return;
  marker.stream->demandedThrough = marker.sequence;
  s.changed.notify_all();
}

std::chrono::microseconds nextDelay(Stream &stream) {
  uint64_t bits = stream.delays();
  if (bits % 4 != 0)
    return std::chrono::microseconds(0);
  double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  return std::chrono::microseconds(
      static_cast<int64_t>(kMaxDelayMicroseconds * u * u * u));
}

void runWorker(std::shared_ptr<Stream> stream) {
  Scheduler &s = scheduler();
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.changed.wait(lock, [&] {
      return !stream->queue.empty() || stream->destroyed || s.shuttingDown;
    });
    if (stream->queue.empty())
      break;
    // References into a deque survive push_back; only this worker pops.
    Item &item = stream->queue.front();
    for (const MarkerPtr &marker : item.waitFor)
      demand(s, *marker);
    s.changed.wait(lock, [&] {
      if (s.shuttingDown)
        return true;
      for (const MarkerPtr &marker : item.waitFor)
        if (!marker->done)
          return false;
      return true;
    });
    if (stream->communication)
      s.changed.wait_for(lock, kCommunicationCap, [&] {
        return s.shuttingDown || stickyError() != cudaSuccess ||
               stream->demandedThrough >= item.done->sequence;
      });
    bool run = !s.shuttingDown;
    std::chrono::microseconds delay = nextDelay(*stream);
    Work work = std::move(item.work);
    lock.unlock();
    if (run && delay.count() > 0)
      std::this_thread::sleep_for(delay);
    // After a fault the device runs nothing more, as a GPU would.
    if (run && stickyError() == cudaSuccess)
      work();
    work = nullptr;
    lock.lock();
    item.done->done = true;
    item.done->doneAt = std::chrono::steady_clock::now();
    item.done->stream = nullptr;
    stream->queue.pop_front();
    s.changed.notify_all();
  }
  --s.runningWorkers;
  s.changed.notify_all();
}

/// At exit: lets running items finish (briefly), skips the rest.
void stopWorkersAtExit() {
  Scheduler &s = scheduler();
  std::unique_lock<std::mutex> lock(s.mutex);
  s.shuttingDown = true;
  s.changed.notify_all();
  // A worker blocked inside its work (a collective whose peer is gone) must
  // not hang the exit: the process ends without it.
  s.changed.wait_for(lock, std::chrono::seconds(1),
                     [&] { return s.runningWorkers == 0; });
}

/// Starts a stream and its worker. Caller holds the lock.
std::shared_ptr<Stream> startStream(Scheduler &s, cudaStream_t handle,
                                    bool legacy, bool blocking) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(stopWorkersAtExit); });
  auto stream = std::make_shared<Stream>();
  stream->handle = handle;
  stream->legacy = legacy;
  stream->blocking = blocking;
  stream->delays.seed(randomBits());
  s.streams[handle] = stream;
  ++s.runningWorkers;
  // The worker owns its stream: it outlives cudaStreamDestroy until the
  // queue has run.
  std::thread(runWorker, stream).detach();
  return stream;
}

/// The live stream `handle` names (starting the legacy one on first use),
/// or null. Caller holds the lock.
Stream *findStream(Scheduler &s, cudaStream_t handle) {
  if (legacyHandle(handle)) {
    auto it = s.streams.find(nullptr);
    if (it != s.streams.end())
      return it->second.get();
    return startStream(s, nullptr, /*legacy=*/true, /*blocking=*/true).get();
  }
  auto it = s.streams.find(handle);
  return it == s.streams.end() ? nullptr : it->second.get();
}

} // namespace

cudaError_t enqueueAfter(cudaStream_t handle, std::string what, Work work,
                         std::vector<MarkerPtr> waitFor, MarkerPtr *done) {
  if (cudaError_t error = checkCall())
    return error;
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.shuttingDown)
    return cudaErrorCudartUnloading;
  Stream *stream = findStream(s, handle);
  if (!stream)
    return cudaErrorInvalidResourceHandle;
  // The legacy default stream's implicit synchronisation.
  auto waitForLast = [&](const Stream &other) {
    if (other.last && !other.last->done)
      waitFor.push_back(other.last);
  };
  if (stream->legacy) {
    for (const auto &[otherHandle, other] : s.streams)
      if (other.get() != stream && other->blocking)
        waitForLast(*other);
  } else if (stream->blocking) {
    auto legacy = s.streams.find(nullptr);
    if (legacy != s.streams.end())
      waitForLast(*legacy->second);
  }
  auto marker = std::make_shared<Marker>();
  marker->stream = stream;
  marker->sequence = stream->nextSequence++;
  stream->last = marker;
  stream->queue.push_back(
      Item{std::move(what), std::move(work), std::move(waitFor), marker});
  if (done)
    *done = marker;
  s.changed.notify_all();
  return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t stream, std::string what, Work work) {
  return enqueueAfter(stream, std::move(what), std::move(work), {}, nullptr);
}

void markCommunicationStream(cudaStream_t handle) {
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (Stream *stream = findStream(s, handle))
    stream->communication = true;
}

bool pollDone(const MarkerPtr &marker) {
  if (!marker)
    return true;
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  demand(s, *marker);
  return marker->done;
}

std::chrono::steady_clock::time_point doneAt(const MarkerPtr &marker) {
  std::lock_guard<std::mutex> lock(scheduler().mutex);
  return marker->doneAt;
}

void waitFor(const MarkerPtr &marker) {
  if (!marker)
    return;
  Scheduler &s = scheduler();
  std::unique_lock<std::mutex> lock(s.mutex);
  demand(s, *marker);
  s.changed.wait(lock, [&] { return marker->done || s.shuttingDown; });
}

bool isStream(cudaStream_t handle) {
  if (legacyHandle(handle))
    return true;
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.streams.count(handle) != 0;
}

std::string describeStream(cudaStream_t handle) {
  if (legacyHandle(handle))
    return "the legacy default stream";
  return absl::StrFormat("stream %p", static_cast<const void *>(handle));
}

void synchronizeAllStreams() {
  std::vector<MarkerPtr> lasts;
  {
    Scheduler &s = scheduler();
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const auto &[handle, stream] : s.streams)
      if (stream->last)
        lasts.push_back(stream->last);
  }
  for (const MarkerPtr &marker : lasts)
    waitFor(marker);
}

void notifyStreams() {
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.changed.notify_all();
}

} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream,
                                      unsigned int flags) {
  if (cudaError_t error = checkCall())
    return error;
  if (!stream || (flags & ~cudaStreamNonBlocking) != 0)
    return failed(cudaErrorInvalidValue);
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.shuttingDown)
    return failed(cudaErrorCudartUnloading);
  // Handles are never reused, so a destroyed stream's stays invalid; they
  // point at nothing (nothing outside this file looks behind a handle).
  auto handle = reinterpret_cast<cudaStream_t>(
      uintptr_t{0x5e000000} + 0x10 * ++s.streamsCreated);
  startStream(s, handle, /*legacy=*/false,
              /*blocking=*/(flags & cudaStreamNonBlocking) == 0);
  *stream = handle;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  if (!selectedDevice())
    return failed(cudaErrorNoDevice);
  if (legacyHandle(handle))
    return failed(cudaErrorInvalidResourceHandle);
  Scheduler &s = scheduler();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.streams.find(handle);
    if (it == s.streams.end())
      return failed(cudaErrorInvalidResourceHandle);
    // As documented, the call returns at once and the stream's pending
    // work still runs; its worker then stops.
    it->second->destroyed = true;
    s.streams.erase(it);
    s.changed.notify_all();
  }
  return stickyOr(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  // An empty item: on the legacy default stream it waits, as any of its
  // work does, for the blocking streams' earlier work.
  MarkerPtr marker;
  if (cudaError_t error =
          enqueueAfter(handle, "cudaStreamSynchronize", [] {}, {}, &marker))
    return failed(error);
  waitFor(marker);
  afterSynchronization();
  return stickyOr(cudaSuccess);
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  if (cudaError_t error = checkCall())
    return error;
  Scheduler &s = scheduler();
  std::lock_guard<std::mutex> lock(s.mutex);
  Stream *stream = findStream(s, handle);
  if (!stream)
    return failed(cudaErrorInvalidResourceHandle);
  if (!stream->last || stream->last->done)
    return cudaSuccess;
  demand(s, *stream->last);
  return cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize() {
  if (cudaError_t error = checkCall())
    return error;
  synchronizeAllStreams();
  afterSynchronization();
  return stickyOr(cudaSuccess);
}

} // extern "C"
