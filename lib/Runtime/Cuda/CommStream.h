//===- CommStream.h - collectives on a stream of their own ------*- C++ -*-===//
//
// Private to the CUDA backend. The NCCL calls of a step go on two
// communication streams, lanes, each in program order (the same order on
// every rank). Gradient reductions (all-reduces, reduce-scatters and their
// buckets) run on the reductions lane, over a communicator of their own per
// group (NcclGroup::forReductions); everything else (gathers, tensor-
// parallel collectives, expert exchanges) on the main lane. So a gather the
// step waits for is never queued behind a gradient bucket that nothing reads
// until the optimizer: one stream per kind of traffic. Each communicator is
// used by one lane only, in program order on every rank. Events order the
// lanes with the compute stream: a collective starts after the compute work
// before it, and the compute stream waits for it just before its first
// reader. moe-schedule-collectives puts a gradient reduction right after its
// gradient, so it overlaps the rest of the backward pass, and a parameter's
// gather one layer ahead of its readers. For everything else the reader is
// the next instruction, and there is no overlap, only order.
//
// The memory plan places a collective's result from its position on, so the
// communication stream may write it late. Its input may be reused after the
// position: an all-reduce runs in place on its result (copied first), and a
// reduce-scatter reads a private copy, freed on the communication stream.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_COMMSTREAM_H
#define MOE_LIB_RUNTIME_CUDA_COMMSTREAM_H

#include "StepTimeline.h"

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moe::rt::cuda {

class CommStream {
public:
  /// The kinds of traffic, each on a stream of its own.
  enum class Lane { Main, Reductions };

  static absl::StatusOr<std::unique_ptr<CommStream>>
  create(const Program &program);
  ~CommStream();

  cudaStream_t stream(Lane lane = Lane::Main) const {
    return lane == Lane::Main ? comm : reductions;
  }

  /// The groups (by index) whose gradient reductions run on the reductions
  /// lane: those `program` (this stream's) reduces over with a first reader
  /// later than the next instruction (neededBy). Each needs a second
  /// communicator.
  std::vector<bool> groupsReducedLater(const Program &program) const;

  /// The instruction before which the compute stream needs instruction
  /// `index`'s results: its first reader (the step's end when none reads
  /// them), or index + 1 when `deferrable` is false.
  size_t neededBy(size_t index, bool deferrable) const;

  /// Enqueues work(stream(lane)) after everything enqueued on `compute` so
  /// far; the compute stream waits for it before instruction `neededBy`.
  absl::Status run(cudaStream_t compute, size_t neededBy,
                   const std::function<absl::Status(cudaStream_t)> &work,
                   Lane lane = Lane::Main);
  /// run() with the compute stream waiting for the work right away (an
  /// exchange whose rows the same instruction goes on with).
  absl::Status runNow(cudaStream_t compute,
                      const std::function<absl::Status(cudaStream_t)> &work);
  /// Before instruction `index`: the compute stream waits for what it reads.
  absl::Status before(cudaStream_t compute, size_t index);
  /// The end of a step (or an error): the compute stream waits for all.
  absl::Status finish(cudaStream_t compute);
  /// --trace: the work run() enqueues from here on is a span of
  /// `timeline`'s communication track named `label` (none: untraced).
  void traceAs(StepTimeline *timeline, std::string label) {
    this->timeline = timeline;
    this->label = std::move(label);
  }

private:
  CommStream() = default;
  absl::Status waitFor(cudaStream_t compute, std::vector<cudaEvent_t> &events);

  cudaStream_t comm = nullptr, reductions = nullptr;
  /// For each instruction, the first later one reading one of its results.
  std::vector<size_t> firstReader;
  std::map<size_t, std::vector<cudaEvent_t>> pending;
  StepTimeline *timeline = nullptr;
  std::string label;
};

/// --trace: starts the compute-track span of `instruction` on `compute`
/// (none without a timeline), and names what the instruction enqueues on
/// `comm` (null: one rank) after it. The caller ends the span.
absl::StatusOr<std::optional<size_t>>
startInstructionSpan(StepTimeline *timeline, CommStream *comm,
                     cudaStream_t compute, const Instruction &instruction);

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_COMMSTREAM_H
