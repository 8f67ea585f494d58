//===- GlobalNorm.h - a GlobalNorm instruction's host part ------*- C++ -*-===//
//
// Every backend computes each operand's sum of squares its own way; what
// follows is the same for all and written here once: each operand's sum
// is summed over its group (int attribute i, -1 for none), then over the
// pipeline stages (each gradient lives on one stage; the others add exact
// zeros), and the norm is semantics::normFromSquares of them.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_GLOBALNORM_H
#define MOE_RUNTIME_ENGINE_GLOBALNORM_H

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <cstdint>
#include <functional>

namespace moe::rt::comm {
class Group;
} // namespace moe::rt::comm

namespace moe::rt::engine {

/// The norm of operands whose local sums of squares are `squares` (which
/// it overwrites with their sums over the ranks). `groupOf` maps a program
/// group to its communication group; none on one rank, where every group
/// is a group of one. `stages` is the group of the pipeline stages, none
/// without a pipeline. A collective call of the ranks of those groups.
absl::StatusOr<float>
globalNormFromSquares(absl::Span<double> squares,
                      absl::Span<const int64_t> groupOfOperand,
                      const std::function<comm::Group &(int64_t)> &groupOf,
                      comm::Group *stages);

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_GLOBALNORM_H
