//===- LossSlice.h - the forward pass a loss needs --------------*- C++ -*-===//
//
// An evaluation step (moe-run --eval-data) computes the loss of a batch and
// changes nothing: the LM head's cross-entropy (evaluatedLoss). It runs the
// training step's own instructions, only those the loss depends on: following
// each operand back to the last instruction writing it before its reader, from
// the one writing the loss. That is the forward pass, with its collectives, and
// nothing of the backward pass, the gradient reductions or the optimizer, which
// all come after the loss. Every rank derives the same slice from the same
// program, so their collectives still pair up.
//
// Persistent buffers change only in place, through operands: the updates
// without results (AdamW, the FP8 amax and expert-load updates, the
// expert-load counter) and the FP8 experts, which fold this step's amaxes
// into their amax history. The slice counts every optimizer-state operand
// as written, and every persistent operand of an update. An update lands in
// the slice only if a later reader of what it wrote does; what the slice
// writes of the state (the FP8 experts' histories) is listed, so that the
// evaluation can put it back.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_LOSSSLICE_H
#define MOE_RUNTIME_ENGINE_LOSSSLICE_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <vector>

namespace moe::rt::engine {

struct LossSlice {
  /// The buffer whose value the slice computes.
  uint32_t value = 0;
  /// runs[i]: whether instruction i computes something the loss reads.
  std::vector<bool> runs;
  /// The parameters and optimizer state those instructions change, which
  /// an evaluation restores afterwards.
  std::vector<uint32_t> changedState;
};

/// The instructions the value of `buffer` just before instruction `before`
/// (its last write before it) depends on; none when nothing writes it
/// before.
LossSlice dependencySlice(const Program &program, uint32_t buffer,
                          size_t before);

/// The loss an evaluation reports: the cross-entropy of the LM head
/// (operand 0 of moec's loss = weighted_sum(ce, router losses...), which a
/// CrossEntropy or LinearCrossEntropy writes), as validation losses and
/// perplexities are; the program's loss when it has no such form.
uint32_t evaluatedLoss(const Program &program);

/// The slice of a verified `program` for its evaluatedLoss. For a pipelined
/// one, an error if the loss depends on an instruction outside the forward
/// phase (which forward actions alone would not run).
absl::StatusOr<LossSlice> lossSlice(const Program &program);

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_LOSSSLICE_H
