//===- Bpe.h - a BPE model: vocabulary and merges by rank -------*- C++ -*-===//
//
// HF's models::bpe::BPE without dropout: a word's characters become
// symbols (unknown ones bytes `<0xXX>` with byte fallback, or the unk token,
// fused when fuse_unk), then the pair of adjacent symbols with the lowest
// merge rank is merged, leftmost first, until no pair has a merge.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TEXT_BPE_H
#define MOE_RUNTIME_TEXT_BPE_H

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moe::rt::text {

struct BpeOptions {
  std::optional<std::string> unkToken;
  bool fuseUnk = false;
  bool byteFallback = false;
  /// A word that is itself in the vocabulary is that token, whatever the
  /// merges would make of it (Llama 3).
  bool ignoreMerges = false;
};

class BpeModel {
public:
  /// `merges` in rank order, each a pair of vocabulary tokens whose
  /// concatenation is in the vocabulary. Errors name `where` (e.g.
  /// "tokenizer.json: model.merges[12]").
  static absl::StatusOr<BpeModel>
  create(absl::flat_hash_map<std::string, int64_t> vocab,
         const std::vector<std::pair<std::string, std::string>> &merges,
         BpeOptions options, const std::string &where);

  /// Appends the ids of `word` (one pre-tokenized piece) to `ids`. A
  /// character with no token, no byte fallback and no unk token is left out,
  /// as HF does, and counted in `dropped` when given.
  void tokenize(std::string_view word, std::vector<int64_t> &ids,
                int64_t *dropped = nullptr) const;

  std::optional<int64_t> tokenId(std::string_view token) const;
  /// The token of `id`, or null if no token has it.
  const std::string *idToken(int64_t id) const;
  /// One past the largest id.
  int64_t vocabSize() const { return vocabSize_; }
  /// The number of tokens, which is what HF's BPE calls its vocabulary size
  /// (and numbers added tokens from): less than vocabSize() when ids have gaps.
  int64_t numTokens() const { return static_cast<int64_t>(vocab_.size()); }

private:
  struct Merge {
    int32_t rank;
    int64_t newId;
  };
  static uint64_t pairKey(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  }

  absl::flat_hash_map<std::string, int64_t> vocab_;
  /// Sparse, as HF's: a file may give a token the id 2000000000.
  absl::flat_hash_map<int64_t, std::string> tokens_;
  int64_t vocabSize_ = 0;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int64_t> unkId_;
  /// The id of `<0xXX>` for each byte, when byte fallback is on.
  std::vector<std::optional<int64_t>> byteIds_;
};

} // namespace moe::rt::text

#endif // MOE_RUNTIME_TEXT_BPE_H
