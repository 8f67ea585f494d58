//===- TestData.cpp - data every rank can compute for every rank ----------===//
#include "TestData.h"

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

} // namespace moe::commtest
