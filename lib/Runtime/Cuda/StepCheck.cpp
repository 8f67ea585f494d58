//===- StepCheck.cpp - a step's checks as the CPU reports them ------------===//
#include "moe/Runtime/Cuda/StepCheck.h"

#include "moe/Runtime/Engine/Executor.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {

absl::Status stepCheckStatus(const Program &program, const StepCheck &check,
                             int64_t step) {
  if (check.kind == StepCheck::Passed)
    return absl::OkStatus();
  if (check.kind == StepCheck::NonFiniteLoss ||
      check.kind == StepCheck::NonFiniteNorm)
    return absl::InvalidArgumentError(
        atStep(step, absl::StrCat(check.kind == StepCheck::NonFiniteLoss
                                      ? "loss"
                                      : "gradient norm",
                                  " is not finite (", check.value, ")")));
  bool token = check.kind == StepCheck::BadToken;
  if ((!token && check.kind != StepCheck::BadTarget) ||
      check.instruction >= program.instructions.size() ||
      check.idsBuffer >= program.buffers.size())
    return absl::InternalError(atStep(
        step, absl::StrCat("the device recorded an unknown check (kind ",
                           check.kind, ", instruction ", check.instruction,
                           ", buffer ", check.idsBuffer, ")")));
  return absl::InvalidArgumentError(atStep(
      step,
      absl::StrCat(
          describeInstruction(program, check.instruction),
          token ? ": token id " : ": target id ", check.id, " at ",
          describeIdPosition(program.buffers[check.idsBuffer], check.position),
          token ? " is outside the embedding table [0, "
                : " is outside the vocabulary [0, ",
          check.limit, ")")));
}

} // namespace moe::rt::cuda
