//===- Checksum.h - 64-bit checksums of file contents -----------*- C++ -*-===//
//
// 64-bit FNV-1a: a change of any single byte always changes the sum (each
// step is a bijection of the state), and a random change goes unseen with
// probability about 2^-64. It is not a cryptographic hash.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_CHECKSUM_H
#define MOE_RUNTIME_IO_CHECKSUM_H

#include <cstddef>
#include <cstdint>

namespace moe::rt::io {

inline uint64_t checksum64(const uint8_t *data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i)
    hash = (hash ^ data[i]) * 0x100000001b3ull;
  return hash;
}

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_CHECKSUM_H
