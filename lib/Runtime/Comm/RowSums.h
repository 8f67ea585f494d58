//===- RowSums.h - the fixed-order sums of the collectives ------*- C++ -*-===//
//
// The additions behind allReduceSum and reduceScatterSum (Communicator.h):
// one rank holds every rank's copy of a chunk as consecutive rows and adds
// them in row (group-rank) order. Separate from Group.cpp so that the unit
// tests can check the arithmetic without a multi-rank world.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_COMM_ROWSUMS_H
#define MOE_LIB_RUNTIME_COMM_ROWSUMS_H

#include "moe/Runtime/Comm/Communicator.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace moe::rt::comm::detail {

/// `acc[i] += x[i]`. int32 sums wrap (done in uint32, where overflow is
/// defined) instead of being undefined behaviour.
template <typename T> void addInto(T *acc, const T *x, size_t count) {
  if constexpr (std::is_same_v<T, float>) {
    for (size_t i = 0; i < count; ++i)
      acc[i] += x[i];
  } else {
    for (size_t i = 0; i < count; ++i)
      acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) +
                                    static_cast<uint32_t>(x[i]));
  }
}

/// out = rows[0] + rows[1] + ... + rows[n-1], added in that order for every
/// element: the fixed order that makes the sums deterministic. `out` must
/// not overlap `rows`.
template <typename T> void sumRows(T *out, const T *rows, int n, size_t count) {
  if (count == 0)
    return;
  std::memcpy(out, rows, count * sizeof(T));
  for (int i = 1; i < n; ++i)
    addInto(out, rows + static_cast<size_t>(i) * count, count);
}

/// The BF16 rows' sum: every value decoded exactly to fp32, added in fp32
/// in row order, and the total rounded once to nearest even (NaNs quiet).
/// Rounding after every addition instead would lose the low bits of the
/// partial sums, and a rank's chunk would not equal the fp32 sum of the
/// ranks' values rounded, which is what a single process computes.
void sumRows(Bf16 *out, const Bf16 *rows, int n, size_t count);

} // namespace moe::rt::comm::detail

#endif // MOE_LIB_RUNTIME_COMM_ROWSUMS_H
