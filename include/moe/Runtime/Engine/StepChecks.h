//===- StepChecks.h - checks of a step's data every backend makes -*- C++ -*-===//
//
// What the verifier cannot know, the values of a step's ids, is checked as
// the step runs, by every backend with the same rule and message (the CPU
// on its buffers, a device backend on the ids it reads back).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_STEPCHECKS_H
#define MOE_RUNTIME_ENGINE_STEPCHECKS_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>

namespace moe::rt::engine {

/// The targets of a loss (instruction `index`, ids of buffer `targets`):
/// they index the logits' last dim, so negative ones are ignored (HF
/// -100) and ones >= `vocab` are a data error naming the instruction and
/// the position. Returns how many are in [0, vocab): what the mean
/// divides by.
absl::StatusOr<int64_t> checkTargets(const Program &program, size_t index,
                                     const Buffer &targets, const int32_t *ids,
                                     int64_t vocab);

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_STEPCHECKS_H
