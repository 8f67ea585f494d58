//===- TestData.cpp - data every rank can compute for every rank ----------===//
#include "TestData.h"

#include "moe/Runtime/IO/Float16.h"

#include "absl/strings/str_format.h"

#include <cmath>
#include <cstring>

namespace moe::commtest {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t hashOf(int64_t worldRank, int64_t index, uint64_t salt) {
  return mix(mix(mix(salt) ^ static_cast<uint64_t>(worldRank)) ^
             static_cast<uint64_t>(index));
}

float floatValue(int64_t worldRank, int64_t index, uint64_t salt) {
  uint64_t h = hashOf(worldRank, index, salt);
  float mantissa = 1.0f + static_cast<float>(h & 0x7fffff) / 8388608.0f;
  int exponent = static_cast<int>((h >> 23) % 16) - 8;
  float value = std::ldexp(mantissa, exponent);
  return (h >> 40) & 1 ? -value : value;
}

int32_t intValue(int64_t worldRank, int64_t index, uint64_t salt) {
  return static_cast<int32_t>(
      static_cast<uint32_t>(hashOf(worldRank, index, salt) >> 16));
}

rt::comm::Bf16 bf16Value(int64_t worldRank, int64_t index, uint64_t salt) {
  // Columns of world ranks 0, 1, 2 (bits):
  //  0: 2^24, 1, -2^24. Rank order: 2^24 + 1 is 2^24 in fp32, so 0; any
  //     other order gives 1.
  //  1: 1, 2^-8, 2^-8. Once: 1 + 2^-7. Rounding after each addition: each
  //     1 + 2^-8 is a tie that goes to 1, so 1.
  //  2: 1 + 2^-7, 2^-8, 0. A tie, rounded to the even 1 + 2^-6.
  //  3: 1, 2^-8, 2^-30. fp32 loses the 2^-30, and the tie goes to 1 (the
  //     exact sum would round up).
  static constexpr uint16_t kColumns[4][3] = {{0x4b80, 0x3f80, 0xcb80},
                                              {0x3f80, 0x3b80, 0x3b80},
                                              {0x3f81, 0x3b80, 0x0000},
                                              {0x3f80, 0x3b80, 0x3080}};
  if (index >= 0 && index < 4 && worldRank >= 0 && worldRank < 3)
    return {kColumns[index][worldRank]};
  return {rt::io::floatToBf16(floatValue(worldRank, index, salt))};
}

std::vector<rt::comm::Bf16>
bf16Sum(const std::vector<std::vector<rt::comm::Bf16>> &rows) {
  std::vector<rt::comm::Bf16> sum(rows.empty() ? 0 : rows[0].size());
  for (size_t i = 0; i < sum.size(); ++i) {
    float total = rt::io::bf16ToFloat(rows[0][i].bits);
    for (size_t r = 1; r < rows.size(); ++r)
      total += rt::io::bf16ToFloat(rows[r][i].bits);
    sum[i].bits = rt::io::floatToBf16(total);
  }
  return sum;
}

std::string firstMismatch(absl::Span<const float> got,
                          absl::Span<const float> expected) {
  if (got.size() != expected.size())
    return absl::StrFormat("got %d elements, expected %d", got.size(),
                           expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t g, e;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&e, &expected[i], 4);
    if (g != e)
      return absl::StrFormat("element %d: got %.9g (0x%08x), expected %.9g "
                             "(0x%08x)",
                             i, got[i], g, expected[i], e);
  }
  return "";
}

std::string firstMismatch(absl::Span<const int32_t> got,
                          absl::Span<const int32_t> expected) {
  if (got.size() != expected.size())
    return absl::StrFormat("got %d elements, expected %d", got.size(),
                           expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i])
      return absl::StrFormat("element %d: got %d, expected %d", i, got[i],
                             expected[i]);
  return "";
}

std::string firstMismatch(absl::Span<const rt::comm::Bf16> got,
                          absl::Span<const rt::comm::Bf16> expected) {
  if (got.size() != expected.size())
    return absl::StrFormat("got %d elements, expected %d", got.size(),
                           expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].bits != expected[i].bits)
      return absl::StrFormat("element %d: got bf16 0x%04x, expected 0x%04x",
                             i, got[i].bits, expected[i].bits);
  return "";
}

} // namespace moe::commtest
