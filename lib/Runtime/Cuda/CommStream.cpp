//===- CommStream.cpp - collectives on a stream of their own --------------===//
#include "CommStream.h"

#include "CudaStatus.h"

#include "moe/Runtime/Artifact/OpTable.h"

#include <algorithm>
#include <optional>

namespace moe::rt::cuda {

absl::StatusOr<std::unique_ptr<CommStream>>
CommStream::create(const Program &program) {
  std::unique_ptr<CommStream> stream(new CommStream());
  MOE_CUDA_OK(cudaStreamCreateWithFlags(&stream->comm, cudaStreamNonBlocking));
  MOE_CUDA_OK(
      cudaStreamCreateWithFlags(&stream->reductions, cudaStreamNonBlocking));
  size_t n = program.instructions.size();
  stream->firstReader.assign(n, n);
  // The instruction writing each buffer last, as we walk: its results' first
  // reader is the first later instruction with one of them as an operand.
  std::vector<int64_t> writer(program.buffers.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    const Instruction &inst = program.instructions[i];
    for (uint32_t b : inst.operands)
      if (writer[b] >= 0) {
        size_t &first = stream->firstReader[writer[b]];
        first = std::min(first, i);
      }
    for (uint32_t b : inst.results)
      writer[b] = static_cast<int64_t>(i);
  }
  return stream;
}

std::vector<bool> CommStream::groupsReducedLater(const Program &program) const {
  std::vector<bool> reduced(program.groups.size(), false);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    bool reduction = inst.opcode == Opcode::AllReduce ||
                     inst.opcode == Opcode::ReduceScatter ||
                     inst.opcode == Opcode::ReduceBucket;
    // The criterion reductionLaneOf (DeviceDispatch.cpp) applies.
    if (reduction && neededBy(i, true) > i + 1)
      for (int64_t group : ops::groupsOf(inst))
        reduced[group] = true;
  }
  return reduced;
}

CommStream::~CommStream() {
  for (cudaStream_t lane : {comm, reductions})
    if (lane)
      cudaStreamSynchronize(lane);
  for (auto &[index, events] : pending)
    for (cudaEvent_t event : events)
      cudaEventDestroy(event);
  for (cudaStream_t lane : {comm, reductions})
    if (lane)
      cudaStreamDestroy(lane);
}

size_t CommStream::neededBy(size_t index, bool deferrable) const {
  return deferrable ? firstReader[index] : index + 1;
}

absl::Status
CommStream::run(cudaStream_t compute, size_t neededBy,
                const std::function<absl::Status(cudaStream_t)> &work,
                Lane lane) {
  cudaStream_t on = stream(lane);
  cudaEvent_t ready = nullptr, done = nullptr;
  MOE_CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  MOE_CUDA_OK(cudaEventRecord(ready, compute));
  absl::Status waited =
      cudaStatus(cudaStreamWaitEvent(on, ready, 0), "cudaStreamWaitEvent");
  // Destroying a recorded event is deferred until it completes.
  cudaEventDestroy(ready);
  if (!waited.ok())
    return waited;
  std::optional<size_t> span;
  if (timeline) {
    // The reductions lane runs beside the main one: a track of its own.
    absl::StatusOr<size_t> started =
        timeline->start(on,
                        lane == Lane::Main ? io::TraceTrack::Communication
                                           : io::TraceTrack::AsyncCommunication,
                        label);
    if (!started.ok())
      return started.status();
    span = *started;
  }
  // Recorded even when the work failed: what it enqueued before failing
  // (a copy, a free, part of a group) must still be waited for.
  absl::Status status = work(on);
  if (span)
    if (absl::Status ended = timeline->end(*span, on);
        status.ok() && !ended.ok())
      status = ended;
  MOE_CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  MOE_CUDA_OK(cudaEventRecord(done, on));
  pending[neededBy].push_back(done);
  return status;
}

absl::Status CommStream::runNow(
    cudaStream_t compute,
    const std::function<absl::Status(cudaStream_t)> &work) {
  constexpr size_t kNow = static_cast<size_t>(-1);
  absl::Status status = run(compute, kNow, work);
  // Waited for even after a failure: the caller frees the buffers.
  absl::Status waited = waitFor(compute, pending[kNow]);
  pending.erase(kNow);
  return status.ok() ? waited : status;
}

absl::Status CommStream::waitFor(cudaStream_t compute,
                                 std::vector<cudaEvent_t> &events) {
  absl::Status status;
  for (cudaEvent_t event : events) {
    if (status.ok())
      status = cudaStatus(cudaStreamWaitEvent(compute, event, 0),
                          "cudaStreamWaitEvent");
    cudaEventDestroy(event);
  }
  events.clear();
  return status;
}

absl::Status CommStream::before(cudaStream_t compute, size_t index) {
  auto found = pending.find(index);
  if (found == pending.end())
    return absl::OkStatus();
  absl::Status status = waitFor(compute, found->second);
  pending.erase(found);
  return status;
}

absl::Status CommStream::finish(cudaStream_t compute) {
  absl::Status status;
  for (auto &[index, events] : pending) {
    absl::Status waited = waitFor(compute, events);
    if (status.ok())
      status = waited;
  }
  pending.clear();
  return status;
}

absl::StatusOr<std::optional<size_t>>
startInstructionSpan(StepTimeline *timeline, CommStream *comm,
                     cudaStream_t compute, const Instruction &instruction) {
  if (!timeline)
    return std::optional<size_t>();
  const char *name = opcodeName(instruction.opcode);
  if (comm)
    comm->traceAs(timeline, name);
  absl::StatusOr<size_t> span =
      timeline->start(compute, io::TraceTrack::Compute, name);
  if (!span.ok())
    return span.status();
  return std::optional<size_t>(*span);
}

} // namespace moe::rt::cuda
