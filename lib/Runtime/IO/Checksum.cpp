//===- Checksum.cpp - XXH64 of a byte span --------------------------------===//
//
// XXH64 as its specification spells it (xxhash.com, "xxHash fast digest
// algorithm", XXH64): four lanes each take 8 of every 32 bytes, so the
// multiplies of one stripe do not wait on each other; the tail is folded in
// 8, 4 and 1 bytes at a time, then the avalanche mixes every bit. The unit
// tests check it against libxxhash's digests.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/Checksum.h"

#include "absl/strings/str_format.h"

#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "XXH64 reads little-endian words; this host is not");

namespace moe::rt::io {

namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t load32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = rotl(acc, 31);
  return acc * kPrime1;
}

inline uint64_t mergeRound(uint64_t acc, uint64_t lane) {
  acc ^= round(0, lane);
  return acc * kPrime1 + kPrime4;
}

} // namespace

uint64_t contentChecksum(absl::Span<const uint8_t> bytes) {
  constexpr uint64_t seed = 0;
  const uint8_t *p = bytes.data();
  const uint8_t *end = p + bytes.size();
  uint64_t hash;
  if (bytes.size() >= 32) {
    uint64_t v1 = seed + kPrime1 + kPrime2, v2 = seed + kPrime2, v3 = seed,
             v4 = seed - kPrime1;
    for (; end - p >= 32; p += 32) {
      v1 = round(v1, load64(p));
      v2 = round(v2, load64(p + 8));
      v3 = round(v3, load64(p + 16));
      v4 = round(v4, load64(p + 24));
    }
    hash = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    hash = mergeRound(hash, v1);
    hash = mergeRound(hash, v2);
    hash = mergeRound(hash, v3);
    hash = mergeRound(hash, v4);
  } else {
    hash = seed + kPrime5;
  }
  hash += static_cast<uint64_t>(bytes.size());
  for (; end - p >= 8; p += 8) {
    hash ^= round(0, load64(p));
    hash = rotl(hash, 27) * kPrime1 + kPrime4;
  }
  if (end - p >= 4) {
    hash ^= static_cast<uint64_t>(load32(p)) * kPrime1;
    hash = rotl(hash, 23) * kPrime2 + kPrime3;
    p += 4;
  }
  for (; p < end; ++p) {
    hash ^= *p * kPrime5;
    hash = rotl(hash, 11) * kPrime1;
  }
  hash ^= hash >> 33;
  hash *= kPrime2;
  hash ^= hash >> 29;
  hash *= kPrime3;
  hash ^= hash >> 32;
  return hash;
}

std::string formatChecksum(uint64_t checksum) {
  return absl::StrFormat("xxh64:%016x", checksum);
}

} // namespace moe::rt::io
