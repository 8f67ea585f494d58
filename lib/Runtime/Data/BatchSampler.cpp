//===- BatchSampler.cpp - deterministic random training windows -----------===//
//
// A window's start depends only on (seed, step, row): no sampler state
// carries from one step to the next, so resuming at any step, or filling
// only some rows on a data-parallel rank, reproduces the same windows.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Data/TokenDataset.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace

uint64_t batchHash(uint64_t seed, uint64_t step, uint64_t row,
                   uint64_t attempt) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ step);
  h = splitmix64(h ^ row);
  return splitmix64(h ^ attempt);
}

int64_t sampleWindowStart(uint64_t seed, int64_t step, int64_t row,
                          int64_t numStarts) {
  uint64_t range = static_cast<uint64_t>(numStarts);
  // Lemire: the high word of x * range is uniform once the low word is at
  // least (2^64 - range) mod range.
  uint64_t threshold = (0 - range) % range;
  for (uint64_t attempt = 0;; ++attempt) {
    uint64_t x = batchHash(seed, static_cast<uint64_t>(step),
                           static_cast<uint64_t>(row), attempt);
    unsigned __int128 product = static_cast<unsigned __int128>(x) * range;
    if (static_cast<uint64_t>(product) >= threshold)
      return static_cast<int64_t>(product >> 64);
  }
}

absl::StatusOr<BatchSampler> BatchSampler::create(const TokenDataset &dataset,
                                                  uint64_t seed, int64_t batch,
                                                  int64_t seqLen,
                                                  int64_t vocab) {
  if (batch <= 0 || seqLen <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sampler needs a positive batch size and sequence length, got "
        "batch ",
        batch, " and sequence length ", seqLen));
  if (dataset.numTokens() < seqLen + 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", dataset.path(), "' has ", dataset.numTokens(),
        " tokens, fewer than the ", seqLen + 1, " that one sequence of length ",
        seqLen, " and its targets need"));
  return BatchSampler(dataset, seed, batch, seqLen, vocab);
}

int64_t BatchSampler::windowStart(int64_t step, int64_t row) const {
  return sampleWindowStart(seed_, step, row, numStarts());
}

absl::Status BatchSampler::fill(int64_t step, int32_t *tokens,
                                int32_t *targets) const {
  return fillRows(step, 0, batch_, tokens, targets);
}

absl::Status BatchSampler::fillRows(int64_t step, int64_t firstRow,
                                    int64_t numRows, int32_t *tokens,
                                    int32_t *targets) const {
  if (step < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("batch sampler: step ", step, " is negative"));
  if (firstRow < 0 || numRows < 0 || firstRow > batch_ ||
      numRows > batch_ - firstRow)
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sampler: rows [", firstRow, ", ", firstRow + numRows,
        ") are outside the batch of ", batch_));
  for (int64_t r = 0; r < numRows; ++r) {
    int64_t start = windowStart(step, firstRow + r);
    int32_t *rowTokens = tokens + r * seqLen_;
    int32_t *rowTargets = targets + r * seqLen_;
    if (absl::Status status = dataset_->read(start, seqLen_, rowTokens, vocab_);
        !status.ok())
      return status;
    for (int64_t s = 0; s + 1 < seqLen_; ++s)
      rowTargets[s] = rowTokens[s + 1];
    if (absl::Status status = dataset_->read(start + seqLen_, 1,
                                             rowTargets + seqLen_ - 1, vocab_);
        !status.ok())
      return status;
  }
  return absl::OkStatus();
}

void BatchSampler::markDocuments(int64_t step, int64_t firstRow,
                                 int64_t numRows,
                                 std::optional<int32_t> eosToken,
                                 const int32_t *tokens, int32_t *targets,
                                 int32_t *positions) const {
  for (int64_t r = 0; r < numRows; ++r) {
    int64_t start = windowStart(step, firstRow + r);
    const int32_t *rowTokens = tokens + r * seqLen_;
    int32_t *rowTargets = targets + r * seqLen_;
    int32_t *rowPositions = positions + r * seqLen_;
    // Whether the window's token s (s = seqLen_: its last target) begins a
    // document.
    auto begins = [&](int64_t s) {
      return dataset_->isDocumentStart(start + s) ||
             (eosToken && rowTokens[s - 1] == *eosToken);
    };
    rowPositions[0] = 0;
    for (int64_t s = 1; s <= seqLen_; ++s) {
      bool first = begins(s);
      if (first)
        rowTargets[s - 1] = -100;
      if (s < seqLen_)
        rowPositions[s] = first ? 0 : rowPositions[s - 1] + 1;
    }
  }
}

} // namespace moe::rt::data
