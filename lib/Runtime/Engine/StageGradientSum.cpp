//===- StageGradientSum.cpp - a shared parameter's gradient halves --------===//
//
// Two pipeline stages that hold one parameter (tied embeddings: the lookup
// on the first stage, the LM head on the last) each compute half of its
// gradient. In the optimizer each runs a PipelineGradientSum: it sends its
// half to the other stage's rank, receives that stage's, and adds the two
// in operand order, so both ranks get the same bits and their AdamW
// updates keep the two copies equal.
//
//===----------------------------------------------------------------------===//
#include "Collectives.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/PipelineOrder.h"

#include "absl/strings/str_cat.h"

#include <vector>

namespace moe::rt::engine {
namespace {

// The last point-to-point tag (comm::Group's are 0..32767). The stage
// transfers, which number theirs from 0, have all arrived before the
// optimizer runs, so nothing else between two stages is in flight.
constexpr int kGradientSumTag = 32767;

} // namespace

absl::Status runPipelineGradientSum(const StepContext &context, size_t index) {
  const Program &program = context.program;
  const Instruction &inst = program.instructions[index];
  if (!context.stageGroup)
    return absl::InternalError(
        absl::StrCat(describeInstruction(program, index),
                     ": a gradient sum over pipeline stages outside a "
                     "pipelined step's optimizer"));
  auto [peerOperand, peerStage] = peerGradientHalf(program, index);
  int peer = peerStage % program.pipeline.stages;
  uint32_t own = inst.operands[1 - peerOperand];
  int64_t count = program.buffers[inst.results[0]].numElements();
  auto f32 = [&](uint32_t b) {
    return reinterpret_cast<float *>(context.pointers[b]);
  };

  std::vector<float> received(static_cast<size_t>(count));
  absl::Status status;
  {
    io::TraceScope span(context.trace, io::TraceTrack::Communication,
                        absl::StrCat("exchange ", program.buffers[own].name,
                                     " with ", "pipeline rank ", peer));
    absl::StatusOr<comm::Request> send = context.stageGroup->startSend(
        absl::MakeConstSpan(f32(own), count), peer, kGradientSumTag);
    absl::StatusOr<comm::Request> recv = context.stageGroup->startRecv(
        absl::MakeSpan(received), peer, kGradientSumTag);
    status = !send.ok() ? send.status() : recv.status();
    if (recv.ok() && status.ok())
      status = recv->wait();
    if (send.ok() && status.ok())
      status = send->wait();
  }
  if (!status.ok())
    return absl::Status(
        status.code(),
        absl::StrCat(describeInstruction(program, index),
                     ": exchanging gradient halves with pipeline rank ", peer,
                     " (stage ", peerStage, "): ", status.message()));
  const float *a = peerOperand == 0 ? received.data() : f32(inst.operands[0]);
  const float *b = peerOperand == 1 ? received.data() : f32(inst.operands[1]);
  float *sum = f32(inst.results[0]);
  for (int64_t k = 0; k < count; ++k)
    sum[k] = a[k] + b[k];
  return absl::OkStatus();
}

} // namespace moe::rt::engine
