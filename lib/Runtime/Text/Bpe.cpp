//===- Bpe.cpp - a BPE model: vocabulary and merges by rank ---------------===//
#include "moe/Runtime/Text/Bpe.h"

#include "moe/Runtime/Text/Utf8.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <limits>
#include <queue>

namespace moe::rt::text {

absl::StatusOr<BpeModel>
BpeModel::create(absl::flat_hash_map<std::string, int64_t> vocab,
                 const std::vector<std::pair<std::string, std::string>> &merges,
                 BpeOptions options, const std::string &where) {
  BpeModel model;
  model.tokens_.reserve(vocab.size());
  for (const auto &[token, id] : vocab) {
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return absl::InvalidArgumentError(absl::StrCat(where, ".vocab: token '",
                                                     token, "' has id ", id,
                                                     " outside [0, 2^31)"));
    auto [it, inserted] = model.tokens_.emplace(id, token);
    if (!inserted)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".vocab: id ", id, " is given to both '",
                       std::min(it->second, token), "' and '",
                       std::max(it->second, token), "'"));
    model.vocabSize_ = std::max(model.vocabSize_, id + 1);
  }
  model.vocab_ = std::move(vocab);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto &[left, right] = merges[rank];
    std::optional<int64_t> a = model.tokenId(left);
    std::optional<int64_t> b = model.tokenId(right);
    std::optional<int64_t> merged = model.tokenId(left + right);
    const std::string &missing = !a ? left : !b ? right : left + right;
    if (!a || !b || !merged)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".merges[", rank, "]: token '", missing,
                       "' is not in the vocabulary"));
    // A pair merged twice keeps its later rank, as HF's merge map does.
    model.merges_[pairKey(*a, *b)] = Merge{static_cast<int32_t>(rank), *merged};
  }
  if (options.unkToken) {
    model.unkId_ = model.tokenId(*options.unkToken);
    if (!model.unkId_)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".unk_token: '", *options.unkToken,
                       "' is not in the vocabulary"));
  }
  if (options.byteFallback) {
    model.byteIds_.resize(256);
    for (int b = 0; b < 256; ++b)
      model.byteIds_[b] = model.tokenId(absl::StrFormat("<0x%02X>", b));
  }
  model.options_ = std::move(options);
  return model;
}

std::optional<int64_t> BpeModel::tokenId(std::string_view token) const {
  auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  if (it == vocab_.end())
    return std::nullopt;
  return it->second;
}

const std::string *BpeModel::idToken(int64_t id) const {
  auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int64_t> &ids,
                        int64_t *dropped) const {
  if (word.empty())
    return;
  if (options_.ignoreMerges)
    if (std::optional<int64_t> id = tokenId(word)) {
      ids.push_back(*id);
      return;
    }

  // The symbols of the word, as a linked list that merges shorten.
  struct Symbol {
    int64_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  auto add = [&](int64_t id) {
    int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, true});
  };
  // HF keeps an unknown character pending so that fuse_unk can extend it;
  // byte-fallback tokens do not flush it, so they may come before it.
  std::optional<int64_t> pendingUnk;
  for (size_t pos = 0; pos < word.size();) {
    size_t length = utf8CharLength(word, pos);
    std::string_view character = word.substr(pos, length);
    pos += length;
    if (std::optional<int64_t> id = tokenId(character)) {
      if (pendingUnk) {
        add(*pendingUnk);
        pendingUnk.reset();
      }
      add(*id);
      continue;
    }
    if (options_.byteFallback) {
      bool all = true;
      for (char byte : character)
        all = all && byteIds_[static_cast<unsigned char>(byte)].has_value();
      if (all) {
        for (char byte : character)
          add(*byteIds_[static_cast<unsigned char>(byte)]);
        continue;
      }
    }
    // Without an unk token HF drops the character; so do we, counting it.
    if (!unkId_) {
      if (dropped)
        ++*dropped;
      continue;
    }
    if (pendingUnk && !options_.fuseUnk)
      add(*pendingUnk);
    pendingUnk = unkId_;
  }
  if (pendingUnk)
    add(*pendingUnk);
  if (symbols.empty())
    return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int pos;
    int64_t newId;
    bool operator>(const Candidate &other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>,
                      std::greater<Candidate>>
      queue;
  auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0)
      return;
    auto it =
        merges_.find(pairKey(symbols[left].id, symbols[symbols[left].next].id));
    if (it != merges_.end())
      queue.push(Candidate{it->second.rank, left, it->second.newId});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol &left = symbols[top.pos];
    if (!left.alive || left.next < 0)
      continue;
    // Entries whose pair has changed since they were queued are stale.
    auto it = merges_.find(pairKey(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.newId != top.newId)
      continue;
    Symbol &right = symbols[left.next];
    right.alive = false;
    left.id = top.newId;
    left.next = right.next;
    if (right.next >= 0)
      symbols[right.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = symbols[i].next)
    ids.push_back(symbols[i].id);
}

} // namespace moe::rt::text
