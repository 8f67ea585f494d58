//===- StepChecks.cpp - checks of a step's data every backend makes -------===//
#include "moe/Runtime/Engine/StepChecks.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::engine {

absl::StatusOr<int64_t> checkTargets(const Program &program, size_t index,
                                     const Buffer &targets, const int32_t *ids,
                                     int64_t vocab) {
  int64_t count = 0, n = targets.numElements();
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          describeInstruction(program, index), ": target id ", ids[t], " at ",
          describeIdPosition(targets, t), " is outside the vocabulary [0, ",
          vocab, ")"));
    count += ids[t] >= 0;
  }
  return count;
}

} // namespace moe::rt::engine
