//===- Seal.h - the checksum trailer that seals an artifact -----*- C++ -*-===//
//
// Since version 2.0 a .moebin file is the FlatBuffer of Program.fbs followed
// by a 16-byte trailer:
//
//   bytes [0, 8)   the magic "MOESUM01" (trailer format 1),
//   bytes [8, 16)  the XXH64 checksum (io::contentChecksum) of every byte
//                  before the trailer, little-endian.
//
// The reader checks the trailer before it looks at anything else in the
// file, so any damaged byte, in a name, a shape, an operand index or a float
// attribute, is an error instead of a different program that happens to
// verify. The checksum guards against damage, not against forgery: an edited
// file whose trailer is recomputed is checked by the verifier like any other.
// moec's writer and the runtime's reader share it (both link moe_runtime_io).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_SEAL_H
#define MOE_RUNTIME_ARTIFACT_SEAL_H

#include "moe/Runtime/IO/Checksum.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace moe::rt::artifact {

inline constexpr size_t kSealSize = 16;
inline constexpr char kSealMagic[8] = {'M', 'O', 'E', 'S', 'U', 'M', '0', '1'};

/// The trailer that seals `size` bytes of FlatBuffer.
inline std::array<uint8_t, kSealSize> sealFor(const uint8_t *data,
                                              size_t size) {
  std::array<uint8_t, kSealSize> seal;
  std::memcpy(seal.data(), kSealMagic, sizeof kSealMagic);
  uint64_t sum = io::contentChecksum({data, size});
  for (int i = 0; i < 8; ++i)
    seal[8 + i] = static_cast<uint8_t>(sum >> (8 * i));
  return seal;
}

/// The checksum stored in the last kSealSize bytes of `size` bytes, or
/// nullopt if they do not hold a trailer.
inline std::optional<uint64_t> storedChecksum(const uint8_t *data,
                                              size_t size) {
  if (size < kSealSize)
    return std::nullopt;
  const uint8_t *seal = data + size - kSealSize;
  if (std::memcmp(seal, kSealMagic, sizeof kSealMagic) != 0)
    return std::nullopt;
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i)
    sum |= static_cast<uint64_t>(seal[8 + i]) << (8 * i);
  return sum;
}

} // namespace moe::rt::artifact

#endif // MOE_RUNTIME_ARTIFACT_SEAL_H
