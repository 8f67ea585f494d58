//===- LossSlice.cpp - the forward pass a loss needs ----------------------===//
#include "moe/Runtime/Engine/LossSlice.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moe::rt::engine {
namespace {

bool persistent(const Buffer &buffer) {
  return buffer.kind == BufferKind::Parameter ||
         buffer.kind == BufferKind::OptimizerState ||
         buffer.kind == BufferKind::WorkingCopy;
}

/// The buffers instruction `instruction` may write: its results; the
/// optimizer state among its operands (the FP8 experts fold this step's
/// amaxes into their history); and for an update without results, every
/// parameter, state and working copy it takes.
std::vector<uint32_t> writtenBy(const Program &program,
                                const Instruction &instruction) {
  std::vector<uint32_t> written = instruction.results;
  for (uint32_t b : instruction.operands) {
    const Buffer &buffer = program.buffers[b];
    if (buffer.kind == BufferKind::OptimizerState ||
        (instruction.results.empty() && persistent(buffer)))
      written.push_back(b);
  }
  return written;
}

} // namespace

LossSlice dependencySlice(const Program &program, uint32_t buffer,
                          size_t before) {
  size_t count = program.instructions.size();
  // Each buffer's writers, in program order.
  std::vector<std::vector<size_t>> writers(program.buffers.size());
  std::vector<std::vector<uint32_t>> writes(count);
  for (size_t i = 0; i < count; ++i) {
    writes[i] = writtenBy(program, program.instructions[i]);
    for (uint32_t b : writes[i])
      writers[b].push_back(i);
  }
  LossSlice slice;
  slice.value = buffer;
  slice.runs.assign(count, false);
  std::vector<size_t> pending;
  {
    const std::vector<size_t> &list = writers[buffer];
    auto after = std::lower_bound(list.begin(), list.end(), before);
    if (after != list.begin()) {
      pending.push_back(*std::prev(after));
      slice.runs[pending.back()] = true;
    }
  }
  while (!pending.empty()) {
    size_t reader = pending.back();
    pending.pop_back();
    for (uint32_t b : program.instructions[reader].operands) {
      // The last write before the reader; none: a value from before the
      // step (a weight, an input).
      const std::vector<size_t> &list = writers[b];
      auto after = std::lower_bound(list.begin(), list.end(), reader);
      if (after == list.begin())
        continue;
      size_t writer = *std::prev(after);
      if (!slice.runs[writer]) {
        slice.runs[writer] = true;
        pending.push_back(writer);
      }
    }
  }
  std::vector<bool> changed(program.buffers.size(), false);
  for (size_t i = 0; i < count; ++i)
    if (slice.runs[i])
      for (uint32_t b : writes[i])
        if (persistent(program.buffers[b]) && !changed[b]) {
          changed[b] = true;
          slice.changedState.push_back(b);
        }
  return slice;
}

uint32_t evaluatedLoss(const Program &program) {
  std::vector<int64_t> writers = program.lastWriters();
  int64_t sum = writers[program.loss];
  if (sum < 0 || program.instructions[sum].opcode != Opcode::WeightedSum ||
      program.instructions[sum].operands.empty())
    return program.loss;
  uint32_t first = program.instructions[sum].operands[0];
  int64_t producer = writers[first];
  if (producer >= 0 &&
      (program.instructions[producer].opcode == Opcode::CrossEntropy ||
       program.instructions[producer].opcode == Opcode::LinearCrossEntropy))
    return first;
  return program.loss;
}

absl::StatusOr<LossSlice> lossSlice(const Program &program) {
  LossSlice slice = dependencySlice(program, evaluatedLoss(program),
                                    program.instructions.size());
  if (std::find(slice.runs.begin(), slice.runs.end(), true) == slice.runs.end())
    return absl::InvalidArgumentError(
        "no instruction writes the program's loss");
  for (size_t i = 0; i < slice.runs.size(); ++i)
    if (slice.runs[i] && program.pipeline.enabled() &&
        program.pipeline.instructionPhase[i] != PipelinePhase::Forward)
      return absl::InvalidArgumentError(absl::StrCat(
          "the loss depends on ", describeInstruction(program, i),
          ", which is not in the forward phase of its pipeline stage"));
  return slice;
}

} // namespace moe::rt::engine
