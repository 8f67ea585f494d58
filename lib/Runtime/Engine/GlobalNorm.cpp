//===- GlobalNorm.cpp - a GlobalNorm instruction's host part --------------===//
#include "moe/Runtime/Engine/GlobalNorm.h"

#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/StepSemantics.h"

namespace moe::rt::engine {

absl::StatusOr<float>
globalNormFromSquares(absl::Span<double> squares,
                      absl::Span<const int64_t> groupOfOperand,
                      const std::function<comm::Group &(int64_t)> &groupOf,
                      comm::Group *stages) {
  if (groupOf)
    if (absl::Status status =
            comm::sumEachOverItsGroup(squares, groupOfOperand, groupOf);
        !status.ok())
      return status;
  if (stages)
    if (absl::Status status = comm::sumOverGroup(*stages, squares, {});
        !status.ok())
      return status;
  return semantics::normFromSquares(squares.data(), squares.size());
}

} // namespace moe::rt::engine
