//===- TestData.h - data every rank can compute for every rank --*- C++ -*-===//
//
// The values a rank contributes to a check are a hash of (world rank, index,
// salt), so any rank can compute what any other rank sent and therefore the
// exact expected result, without trusting the layer under test.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOE_COMM_TEST_TESTDATA_H
#define MOE_TOOLS_MOE_COMM_TEST_TESTDATA_H

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace moe::commtest {

/// The splitmix64 finaliser.
uint64_t mix(uint64_t x);

/// A float in +-[2^-8, 2^8) with a full random mantissa: magnitudes differ
/// enough that sums in another order round differently.
float floatValue(int64_t worldRank, int64_t index, uint64_t salt);

/// Any int32, so that sums wrap around.
int32_t intValue(int64_t worldRank, int64_t index, uint64_t salt);

/// A BF16 value: for indexes 0 to 3 of world ranks 0 to 2, ones whose sum
/// shows the layer's rule (TestData.cpp), else floatValue() rounded.
rt::comm::Bf16 bf16Value(int64_t worldRank, int64_t index, uint64_t salt);

template <typename T>
T valueOf(int64_t worldRank, int64_t index, uint64_t salt) {
  if constexpr (std::is_same_v<T, float>)
    return floatValue(worldRank, index, salt);
  else if constexpr (std::is_same_v<T, rt::comm::Bf16>)
    return bf16Value(worldRank, index, salt);
  else
    return intValue(worldRank, index, salt);
}

template <typename T> const char *typeName() {
  if constexpr (std::is_same_v<T, float>)
    return "f32";
  else if constexpr (std::is_same_v<T, rt::comm::Bf16>)
    return "bf16";
  else
    return "i32";
}

/// A value no check sends (-7), for regions that must stay untouched.
template <typename T> T untouched() {
  if constexpr (std::is_same_v<T, rt::comm::Bf16>)
    return rt::comm::Bf16{0xc0e0};
  else
    return static_cast<T>(-7);
}

/// a + b as the layer must compute it: fp32, or int32 wrapping around.
template <typename T> T add(T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    return a + b;
  else
    return static_cast<int32_t>(static_cast<uint32_t>(a) +
                                static_cast<uint32_t>(b));
}

/// The BF16 sum the layer promises for rows[0], rows[1], ... (one row per
/// group rank): each element decoded, added in fp32 in row order, and
/// rounded once to nearest even.
std::vector<rt::comm::Bf16>
bf16Sum(const std::vector<std::vector<rt::comm::Bf16>> &rows);

/// The rank's `count` values starting at `first`.
template <typename T>
std::vector<T> valuesOf(int64_t worldRank, int64_t first, int64_t count,
                        uint64_t salt) {
  std::vector<T> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = valueOf<T>(worldRank, first + i, salt);
  return values;
}

/// "" if `got` and `expected` are bitwise equal, else where they first
/// differ.
std::string firstMismatch(absl::Span<const float> got,
                          absl::Span<const float> expected);
std::string firstMismatch(absl::Span<const int32_t> got,
                          absl::Span<const int32_t> expected);
std::string firstMismatch(absl::Span<const rt::comm::Bf16> got,
                          absl::Span<const rt::comm::Bf16> expected);

} // namespace moe::commtest

#endif // MOE_TOOLS_MOE_COMM_TEST_TESTDATA_H
