//===- TokenDataset.h - token streams and the batch sampler -----*- C++ -*-===//
//
// A TokenDataset is one read-only stream of token ids, mapped from disk:
//
//  * a flat file (nanoGPT's train.bin): little-endian ids of one dtype,
//    uint16 unless the options say otherwise;
//  * a Megatron-LM indexed dataset (prefix.bin + prefix.idx, "MMIDIDX"
//    version 1), whose documents are concatenated in order.
//
// Format detection (DatasetFormat::Auto): if `<path>.idx` exists, or `path`
// ends in ".bin" and `<stem>.idx` exists, or `path` ends in ".idx", the
// dataset is Megatron; otherwise it is a flat file. Opening checks every
// size, header field, pointer and length; errors name the file and the
// offending field or index.
//
// The BatchSampler draws training windows from a dataset. Row r of step s
// starts at a position drawn from a counter-based hash of (seed, s, r), so a
// run resumed at step k sees exactly the batches it would have seen.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_DATA_TOKENDATASET_H
#define MOE_RUNTIME_DATA_TOKENDATASET_H

#include "moe/Runtime/IO/File.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moe::rt::data {

//===----------------------------------------------------------------------===//
// Token dtypes and formats
//===----------------------------------------------------------------------===//

/// How token ids are stored. Megatron indices allow all but UInt32; flat
/// files allow all.
enum class TokenDtype : uint8_t {
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt16,
  UInt32
};

/// "uint16", "int32", ...
const char *tokenDtypeName(TokenDtype dtype);
/// Parses a name written by tokenDtypeName().
std::optional<TokenDtype> parseTokenDtype(const std::string &name);
/// Bytes per token id.
size_t tokenDtypeSize(TokenDtype dtype);
/// The smallest and largest id the dtype holds.
int64_t tokenDtypeMin(TokenDtype dtype);
int64_t tokenDtypeMax(TokenDtype dtype);

/// Megatron's dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
/// 6 float64, 7 float32, 8 uint16. Float codes have no TokenDtype.
std::optional<TokenDtype> tokenDtypeFromMegatronCode(uint8_t code);
/// The Megatron code of `dtype`; none for UInt32.
std::optional<uint8_t> megatronCodeOf(TokenDtype dtype);

enum class DatasetFormat : uint8_t { Auto, Flat, Megatron };

/// "auto", "flat", "megatron".
const char *datasetFormatName(DatasetFormat format);
std::optional<DatasetFormat> parseDatasetFormat(const std::string &name);

/// The two files of a Megatron dataset.
struct MegatronPaths {
  std::string bin;
  std::string idx;
};

/// `path` names a prefix, or the prefix's .bin or .idx: the file pair.
MegatronPaths megatronPathsFor(const std::string &path);

/// The Megatron file pair that auto-detection finds for `path`, if any.
std::optional<MegatronPaths> detectMegatron(const std::string &path);

//===----------------------------------------------------------------------===//
// TokenDataset
//===----------------------------------------------------------------------===//

struct DatasetOptions {
  DatasetFormat format = DatasetFormat::Auto;
  /// The dtype of flat files (Megatron files record their own).
  TokenDtype flatDtype = TokenDtype::UInt16;
};

/// A read-only, memory-mapped token stream. Move-only.
class TokenDataset {
public:
  /// Opens and verifies the dataset at `path`.
  static absl::StatusOr<TokenDataset> open(const std::string &path,
                                           const DatasetOptions &options = {});

  /// Flat or Megatron, never Auto.
  DatasetFormat format() const { return format_; }
  TokenDtype dtype() const { return dtype_; }
  /// The file holding the tokens (the .bin).
  const std::string &path() const { return data_.path(); }
  /// The Megatron index; empty for flat files.
  const std::string &indexPath() const { return indexPath_; }

  int64_t numTokens() const { return numTokens_; }
  /// Megatron: the number of sequences in the index. Flat: 1 (0 if empty).
  int64_t numSequences() const { return numSequences_; }
  /// Megatron: the number of documents. Flat: 1 (0 if empty).
  int64_t numDocuments() const {
    return static_cast<int64_t>(documentStarts_.size()) - 1;
  }
  /// The stream position of document `d`'s first token, for
  /// 0 <= d <= numDocuments(); documentStart(numDocuments()) == numTokens().
  int64_t documentStart(int64_t d) const { return documentStarts_[d]; }
  /// Whether a document starts at stream position `pos` (a Megatron
  /// index's document offsets; a flat file's only document starts at 0).
  bool isDocumentStart(int64_t pos) const {
    return std::binary_search(documentStarts_.begin(),
                              documentStarts_.end() - 1, pos);
  }

  /// The id at stream position `pos`, 0 <= pos < numTokens().
  int64_t token(int64_t pos) const;

  /// Copies ids [pos, pos + count) into `out`. Each id must lie in
  /// [0, vocab) (vocab > 0) or [0, 2^31) (vocab <= 0); the first that does
  /// not is an error naming the file, its stream position (and document,
  /// for Megatron), the id and the vocabulary.
  absl::Status read(int64_t pos, int64_t count, int32_t *out,
                    int64_t vocab = 0) const;

  /// Checks every id against `vocab` as read() does, in one parallel pass
  /// over the mapped file, and reports the first bad one in stream order.
  absl::Status checkVocab(int64_t vocab) const;

  /// The stream position of the first id in [begin, end) outside `vocab`
  /// (as read() checks it), or -1: checkVocab's pass over part of the
  /// stream, for ranks that share the pass.
  int64_t findOutsideVocab(int64_t vocab, int64_t begin, int64_t end) const;
  /// The error read() and checkVocab() give for the id at `pos`.
  absl::Status outsideVocabError(int64_t pos, int64_t vocab) const;

  /// The smallest and largest id, or nullopt for an empty dataset.
  std::optional<std::pair<int64_t, int64_t>> idRange() const;

  TokenDataset(TokenDataset &&) = default;
  TokenDataset &operator=(TokenDataset &&) = default;

private:
  TokenDataset() = default;
  friend class DatasetLoader;

  /// A run of tokens contiguous in the .bin file.
  struct Segment {
    int64_t start = 0;       ///< stream position of its first token
    uint64_t byteOffset = 0; ///< where it starts in the .bin
    int64_t length = 0;      ///< tokens
  };

  /// The segment holding stream position `pos`.
  size_t segmentOf(int64_t pos) const;
  /// The first position in [begin, end) whose id is outside [0, limit), or
  /// -1, on the calling thread.
  int64_t firstOutsideVocab(int64_t begin, int64_t end, int64_t limit) const;
  /// The error for id `id` at position `pos` outside `vocab` (as read()).
  absl::Status outsideVocab(int64_t pos, int64_t id, int64_t vocab) const;

  io::MappedFile data_;
  std::string indexPath_;
  DatasetFormat format_ = DatasetFormat::Flat;
  TokenDtype dtype_ = TokenDtype::UInt16;
  int64_t numTokens_ = 0;
  int64_t numSequences_ = 0;
  std::vector<Segment> segments_;
  std::vector<int64_t> documentStarts_{0};
};

/// Where share `part` of `parts` near-equal shares of `count` items begins
/// (part == parts: the end); the first `count % parts` shares have one more.
inline int64_t shareBegin(int64_t count, int64_t parts, int64_t part) {
  return part * (count / parts) + std::min(part, count % parts);
}

//===----------------------------------------------------------------------===//
// BatchSampler
//===----------------------------------------------------------------------===//

/// The counter-based hash behind the sampler: splitmix64's finalizer
/// chained over the four words.
uint64_t batchHash(uint64_t seed, uint64_t step, uint64_t row,
                   uint64_t attempt);

/// A position uniform in [0, numStarts) drawn from (seed, step, row)
/// (Lemire's multiply-shift with rejection, so exactly uniform).
int64_t sampleWindowStart(uint64_t seed, int64_t step, int64_t row,
                          int64_t numStarts);

/// Draws [batch, seqLen] token windows and their next-token targets:
/// row r of step s reads tokens = data[p : p + S], targets = data[p + 1 :
/// p + S + 1] with p = sampleWindowStart(seed, s, r, N - S). Holds a
/// pointer to the dataset, which must outlive it and stay where it is.
class BatchSampler {
public:
  /// Fails if the dataset holds fewer than seqLen + 1 tokens. With
  /// vocab > 0, every id read is checked against it (lazily, per batch).
  static absl::StatusOr<BatchSampler> create(const TokenDataset &dataset,
                                             uint64_t seed, int64_t batch,
                                             int64_t seqLen, int64_t vocab = 0);

  /// The stream position row `row` of step `step` starts at.
  int64_t windowStart(int64_t step, int64_t row) const;

  /// Fills tokens[B * S] and targets[B * S] (row-major [B, S]) for `step`.
  absl::Status fill(int64_t step, int32_t *tokens, int32_t *targets) const;

  /// Fills rows [firstRow, firstRow + numRows) of `step` only (for a
  /// data-parallel rank); the buffers hold numRows * S ids each.
  absl::Status fillRows(int64_t step, int64_t firstRow, int64_t numRows,
                        int32_t *tokens, int32_t *targets) const;

  /// Document masking for rows fillRows filled: `positions` gets each
  /// token's position in its document, which restarts at every document's
  /// first token (and at the window's start), and a target that is the
  /// first token of the next document becomes -100 (ignored), as in HF's
  /// packed-sequence training. A document starts at each of the dataset's
  /// document offsets (a Megatron index's) and, with `eosToken`, after
  /// every such id.
  void markDocuments(int64_t step, int64_t firstRow, int64_t numRows,
                     std::optional<int32_t> eosToken, const int32_t *tokens,
                     int32_t *targets, int32_t *positions) const;

  uint64_t seed() const { return seed_; }
  int64_t batch() const { return batch_; }
  int64_t seqLen() const { return seqLen_; }
  int64_t vocab() const { return vocab_; }
  /// N - S: the number of distinct window starts.
  int64_t numStarts() const { return dataset_->numTokens() - seqLen_; }

private:
  BatchSampler(const TokenDataset &dataset, uint64_t seed, int64_t batch,
               int64_t seqLen, int64_t vocab)
      : dataset_(&dataset), seed_(seed), batch_(batch), seqLen_(seqLen),
        vocab_(vocab) {}

  const TokenDataset *dataset_;
  uint64_t seed_;
  int64_t batch_;
  int64_t seqLen_;
  int64_t vocab_;
};

} // namespace moe::rt::data

#endif // MOE_RUNTIME_DATA_TOKENDATASET_H
