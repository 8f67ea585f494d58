//===- Checksum.h - hashes of names and of file contents --------*- C++ -*-===//
//
// Two well-known 64-bit hashes, each for one job:
//
//  * fnv1a64: FNV-1a, one multiply per byte (about 1 GB/s). It names things:
//    a parameter's random stream (cpu::nameHash, so it defines the initial
//    weights and must never change) and a group's fingerprint. Inline, so
//    libraries that do not link moe_runtime_io can use it.
//  * contentChecksum: XXH64 (Yann Collet's xxHash, 64-bit, seed 0), four
//    independent lanes of 8 bytes (several GB/s on one core), for whole
//    files: checkpoint shards of many GB, manifests, artifacts. Checksums
//    are written as "xxh64:" and 16 lowercase hex digits (formatChecksum),
//    so a file says which hash it was checked with.
//
// Neither is cryptographic: they detect damage and hand edits, not forgery.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_CHECKSUM_H
#define MOE_RUNTIME_IO_CHECKSUM_H

#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace moe::rt::io {

/// 64-bit FNV-1a of `bytes`.
inline uint64_t fnv1a64(absl::Span<const uint8_t> bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (uint8_t byte : bytes)
    hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

inline uint64_t fnv1a64(std::string_view text) {
  return fnv1a64(absl::Span<const uint8_t>(
      reinterpret_cast<const uint8_t *>(text.data()), text.size()));
}

/// XXH64 of `bytes` with seed 0.
uint64_t contentChecksum(absl::Span<const uint8_t> bytes);

inline uint64_t contentChecksum(std::string_view text) {
  return contentChecksum(absl::Span<const uint8_t>(
      reinterpret_cast<const uint8_t *>(text.data()), text.size()));
}

/// "xxh64:" followed by `checksum` as 16 lowercase hex digits.
std::string formatChecksum(uint64_t checksum);

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_CHECKSUM_H
