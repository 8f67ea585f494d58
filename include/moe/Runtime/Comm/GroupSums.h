//===- GroupSums.h - exact double and count sums over a group ---*- C++ -*-===//
//
// Losses and norms over tokens or tensors split
// across ranks combine per-rank sums that the kernels accumulate in double
// (and integer counts). The communication layer sums fp32 and int32 only,
// which would round the doubles to fp32 and make a partitioned loss differ
// from the single-rank one. So the values travel as raw bits in an
// all-gather (a pure copy), and every rank adds the gathered values itself,
// in group-rank order: the totals are bitwise the same on every rank of the
// group, and as accurate as the single-rank double sums.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_COMM_GROUPSUMS_H
#define MOE_RUNTIME_COMM_GROUPSUMS_H

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/status/status.h"
#include "absl/types/span.h"

#include <cstdint>
#include <functional>

namespace moe::rt::comm {

/// Replaces each of `sums` and `counts` by its sum over `group` (in
/// group-rank order, ((v0 + v1) + v2) ...). Every rank of the group must
/// call it with the same number of values.
absl::Status sumOverGroup(Group &group, absl::Span<double> sums,
                          absl::Span<int64_t> counts);

/// Replaces each values[i] by its sum over group groupIds[i] (none for a
/// negative id; groupOf maps an id to its group): one sumOverGroup per
/// group, in order of first use, the same on every rank. A global norm's
/// squares of tensors split over different groups add up so.
absl::Status sumEachOverItsGroup(absl::Span<double> values,
                                 absl::Span<const int64_t> groupIds,
                                 const std::function<Group &(int64_t)> &groupOf);

} // namespace moe::rt::comm

#endif // MOE_RUNTIME_COMM_GROUPSUMS_H
