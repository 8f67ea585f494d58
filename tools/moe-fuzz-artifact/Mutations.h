//===- Mutations.h - seeded damage to an artifact's bytes -------*- C++ -*-===//
//
// The three families of damage the fuzzer applies to a .moebin file:
//  * byte: one to four bytes flipped or overwritten anywhere;
//  * offset: the file cut, bytes inserted or deleted at a position, or a
//    4-byte aligned word (FlatBuffers offsets and counts are such words)
//    moved by a small amount;
//  * scalar: an aligned 4- or 8-byte word set to a value that breaks
//    arithmetic: 0, 1, -1, the extremes, 1e30, NaN, infinity.
// Each mutation is a pure function of the input and the generator's state,
// so a seed reproduces it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_FUZZ_ARTIFACT_MUTATIONS_H
#define MOE_TOOLS_FUZZ_ARTIFACT_MUTATIONS_H

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace moe::fuzz {

enum class MutationKind { Byte, Offset, Scalar };

const char *mutationKindName(MutationKind kind);

struct Mutant {
  std::vector<uint8_t> bytes;
  /// What was done and where, e.g. "scalar: word at 1216 set to nan".
  std::string description;
};

/// `original` damaged by one mutation of `kind`, drawn from `rng`. Only
/// bytes [0, limit) are touched (limit <= original.size()), so that a
/// mutation can keep a trailer intact.
Mutant mutate(const std::vector<uint8_t> &original, size_t limit,
              MutationKind kind, std::mt19937_64 &rng);

} // namespace moe::fuzz

#endif // MOE_TOOLS_FUZZ_ARTIFACT_MUTATIONS_H
