//===- TextCorpus.h - byte-level text and the synthetic corpus --*- C++ -*-===//
//
// Text for the default training run: byte-level tokens (vocabulary 256) and
// a synthetic English-like corpus drawn from a small probabilistic grammar
// (subject-verb agreement, a/an, counts with plurals, quoted speech,
// questions with agreeing answers, small sums). It is structured enough that
// a small transformer's loss falls far below the unigram entropy, and it is
// the same on every platform for a given seed.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_DATA_TEXTCORPUS_H
#define MOE_RUNTIME_DATA_TEXTCORPUS_H

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::data {

/// The vocabulary of byte-level tokens.
inline constexpr int64_t kByteVocabSize = 256;

/// Paragraphs of synthetic text, each ending with '\n', deterministic per
/// seed. Their total length is exactly `numBytes` (the last paragraph is cut
/// short; numBytes <= 0 gives none).
std::vector<std::string> synthesizeParagraphs(uint64_t seed, int64_t numBytes);

/// Splits `text` after each run of two or more newlines; the last piece
/// takes what remains. Concatenated, the pieces give back `text`.
std::vector<std::string> splitParagraphs(const std::string &text);

/// One token per byte, ids 0..255.
std::vector<int64_t> byteTokens(const std::string &text);

} // namespace moe::rt::data

#endif // MOE_RUNTIME_DATA_TEXTCORPUS_H
