//===- MegatronLoader.cpp - open a Megatron-LM indexed dataset ------------===//
//
// The index ("MMIDIDX", version 1), all little-endian:
//
//   magic "MMIDIDX\x00\x00" (9) | version u64 | dtype code u8 |
//   sequence_count u64 | document_count u64 |
//   sequence_lengths i32[sequence_count] |
//   sequence_pointers i64[sequence_count] (byte offsets into the .bin) |
//   document_indices i64[document_count]
//
// document_indices starts at 0, never decreases and ends at sequence_count;
// document d is sequences [document_indices[d], document_indices[d + 1]).
// The index must be exactly that long. Sequences are concatenated in index
// order into one stream; runs of sequences adjacent in the .bin become one
// segment.
//
// The sequences must cover the .bin exactly, as Megatron's builder writes
// them: every byte in one sequence, none in two, nothing after the last. An
// index paired with the .bin of another (larger) dataset would otherwise
// train on a part of it without a word.
//
//===----------------------------------------------------------------------===//
#include "DatasetLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "megatron datasets are little-endian; this host is not");

namespace moe::rt::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kHeaderSize = 9 + 8 + 1 + 8 + 8;

template <typename T> T load(const uint8_t *bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

class IndexChecker {
public:
  explicit IndexChecker(const MegatronPaths &paths) : paths_(paths) {}

  absl::Status fail(const std::string &what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("megatron index '", paths_.idx, "': ", what));
  }
  absl::Status failData(const std::string &what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("megatron data '", paths_.bin, "': ", what));
  }

  /// The first byte range of the .bin that the sequences (`pointers`,
  /// `lengths` of `itemSize`-byte ids, each already inside the file) leave
  /// uncovered or cover twice.
  absl::Status checkCoverage(const uint8_t *lengths, const uint8_t *pointers,
                             uint64_t sequenceCount, uint64_t itemSize,
                             uint64_t dataSize) const;

private:
  absl::Status failCoverage(const std::string &what) const {
    return fail(absl::StrCat("its sequences do not cover '", paths_.bin,
                             "' exactly: ", what));
  }

  const MegatronPaths &paths_;
};

absl::Status IndexChecker::checkCoverage(const uint8_t *lengths,
                                         const uint8_t *pointers,
                                         uint64_t sequenceCount,
                                         uint64_t itemSize,
                                         uint64_t dataSize) const {
  // A byte range [begin, end) of the .bin and the sequence holding it.
  struct Range {
    uint64_t begin, end, sequence;
  };
  auto rangeOf = [&](uint64_t i) {
    uint64_t begin = static_cast<uint64_t>(load<int64_t>(pointers + 8 * i));
    uint64_t bytes = static_cast<uint64_t>(load<int32_t>(lengths + 4 * i)) *
                     itemSize;
    return Range{begin, begin + bytes, i};
  };
  // Megatron writes the sequences back to back in index order: one pass
  // with no allocation confirms that.
  uint64_t end = 0;
  bool contiguous = true;
  for (uint64_t i = 0; i < sequenceCount && contiguous; ++i) {
    Range range = rangeOf(i);
    if (range.begin == range.end)
      continue;
    contiguous = range.begin == end;
    end = range.end;
  }
  if (contiguous && end == dataSize)
    return absl::OkStatus();

  // Otherwise walk the sequences in byte order to find the first fault.
  std::vector<Range> ranges;
  for (uint64_t i = 0; i < sequenceCount; ++i)
    if (Range range = rangeOf(i); range.begin != range.end)
      ranges.push_back(range);
  std::sort(ranges.begin(), ranges.end(), [](const Range &a, const Range &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.sequence < b.sequence;
  });
  end = 0;
  const Range *previous = nullptr;
  for (const Range &range : ranges) {
    if (range.begin > end)
      return failCoverage(absl::StrCat("bytes [", end, ", ", range.begin,
                                       ") are in no sequence"));
    if (range.begin < end)
      return failCoverage(absl::StrCat(
          "bytes [", range.begin, ", ", std::min(end, range.end),
          ") are in both sequence ", previous->sequence, " and sequence ",
          range.sequence));
    end = range.end;
    previous = &range;
  }
  // In another order than the index's, but exact.
  if (end == dataSize)
    return absl::OkStatus();
  return failCoverage(absl::StrCat(
      "bytes [", end, ", ", dataSize, ") are in no sequence (the ",
      dataSize - end, " bytes after the last; the .bin of another dataset?)"));
}

} // namespace

absl::StatusOr<TokenDataset>
DatasetLoader::openMegatron(const MegatronPaths &paths) {
  IndexChecker check(paths);
  absl::StatusOr<io::MappedFile> index = io::MappedFile::open(paths.idx);
  if (!index.ok())
    return index.status();
  const uint8_t *idx = index->data();
  uint64_t idxSize = index->size();

  // Header.
  if (idxSize < kHeaderSize)
    return check.fail(absl::StrCat("file is truncated: ", idxSize,
                                   " bytes, the header needs ", kHeaderSize));
  if (std::memcmp(idx, kMagic, sizeof kMagic) != 0)
    return check.fail("bad magic (expected \"MMIDIDX\\x00\\x00\")");
  uint64_t version = load<uint64_t>(idx + 9);
  if (version != 1)
    return check.fail(
        absl::StrCat("unsupported version ", version, " (expected 1)"));
  uint8_t code = idx[17];
  std::optional<TokenDtype> dtype = tokenDtypeFromMegatronCode(code);
  if (!dtype) {
    if (code == 6 || code == 7)
      return check.fail(absl::StrCat("dtype code ", static_cast<int>(code),
                                     code == 6 ? " (float64)" : " (float32)",
                                     " cannot hold token ids"));
    return check.fail(
        absl::StrCat("unknown dtype code ", static_cast<int>(code)));
  }
  uint64_t sequenceCount = load<uint64_t>(idx + 18);
  uint64_t documentCount = load<uint64_t>(idx + 26);

  // Exact size: 12 bytes per sequence, 8 per document index.
  uint64_t body = idxSize - kHeaderSize;
  if (sequenceCount > body / 12)
    return check.fail(absl::StrCat(
        "file is truncated: sequence_count ", sequenceCount, " needs ",
        sequenceCount > std::numeric_limits<uint64_t>::max() / 12
            ? std::string("more than 2^64")
            : absl::StrCat(sequenceCount * 12),
        " bytes of lengths and pointers, the file has ", body,
        " after the header"));
  uint64_t rest = body - sequenceCount * 12;
  if (documentCount > rest / 8)
    return check.fail(absl::StrCat("file is truncated: document_count ",
                                   documentCount, " needs more than the ", rest,
                                   " bytes left for document_indices"));
  if (rest != documentCount * 8)
    return check.fail(absl::StrCat("file has ", rest - documentCount * 8,
                                   " trailing bytes after document_indices"));
  const uint8_t *lengths = idx + kHeaderSize;
  const uint8_t *pointers = lengths + 4 * sequenceCount;
  const uint8_t *documents = pointers + 8 * sequenceCount;

  // Data file.
  absl::StatusOr<io::MappedFile> data = io::MappedFile::open(paths.bin);
  if (!data.ok())
    return data.status();
  uint64_t itemSize = tokenDtypeSize(*dtype);
  uint64_t dataSize = data->size();
  if (dataSize % itemSize != 0)
    return check.failData(
        absl::StrCat("size ", dataSize, " bytes is not a multiple of the ",
                     tokenDtypeName(*dtype), " token size ", itemSize));

  // Sequences, merged into segments.
  TokenDataset dataset;
  dataset.format_ = DatasetFormat::Megatron;
  dataset.dtype_ = *dtype;
  dataset.indexPath_ = paths.idx;
  dataset.numSequences_ = static_cast<int64_t>(sequenceCount);
  std::vector<int64_t> sequenceStarts;
  sequenceStarts.reserve(sequenceCount + 1);
  int64_t total = 0;
  for (uint64_t i = 0; i < sequenceCount; ++i) {
    int32_t length = load<int32_t>(lengths + 4 * i);
    int64_t pointer = load<int64_t>(pointers + 8 * i);
    if (length < 0)
      return check.fail(
          absl::StrCat("sequence_lengths[", i, "] = ", length, " is negative"));
    if (pointer < 0)
      return check.fail(absl::StrCat("sequence_pointers[", i, "] = ", pointer,
                                     " is negative"));
    if (static_cast<uint64_t>(pointer) % itemSize != 0)
      return check.fail(absl::StrCat("sequence_pointers[", i, "] = ", pointer,
                                     " is not a multiple of the ",
                                     tokenDtypeName(*dtype), " token size ",
                                     itemSize));
    uint64_t begin = static_cast<uint64_t>(pointer);
    uint64_t bytes = static_cast<uint64_t>(length) * itemSize;
    if (begin > dataSize || bytes > dataSize - begin)
      return check.fail(absl::StrCat("sequence ", i, " (sequence_pointers[", i,
                                     "] = ", pointer, ", sequence_lengths[", i,
                                     "] = ", length, ") ends at byte ",
                                     begin + bytes, ", past the end of '",
                                     paths.bin, "' (", dataSize, " bytes)"));
    if (total > std::numeric_limits<int64_t>::max() - length)
      return check.fail("the total of sequence_lengths overflows int64");
    sequenceStarts.push_back(total);
    if (length > 0) {
      std::vector<TokenDataset::Segment> &segments = dataset.segments_;
      if (!segments.empty() &&
          segments.back().byteOffset + segments.back().length * itemSize ==
              begin)
        segments.back().length += length;
      else
        segments.push_back({total, begin, length});
    }
    total += length;
  }
  sequenceStarts.push_back(total);
  dataset.numTokens_ = total;
  if (absl::Status status = check.checkCoverage(lengths, pointers,
                                                sequenceCount, itemSize,
                                                dataSize);
      !status.ok())
    return status;

  // Documents.
  if (documentCount == 0)
    return check.fail("document_count is 0: document_indices needs at least "
                      "the leading 0");
  dataset.documentStarts_.clear();
  dataset.documentStarts_.reserve(documentCount);
  int64_t previous = 0;
  for (uint64_t d = 0; d < documentCount; ++d) {
    int64_t value = load<int64_t>(documents + 8 * d);
    if (d == 0 && value != 0)
      return check.fail(
          absl::StrCat("document_indices[0] = ", value, " (expected 0)"));
    if (value < previous)
      return check.fail(absl::StrCat("document_indices[", d, "] = ", value,
                                     " is smaller than document_indices[",
                                     d - 1, "] = ", previous));
    if (static_cast<uint64_t>(value) > sequenceCount)
      return check.fail(absl::StrCat("document_indices[", d, "] = ", value,
                                     " is past sequence_count ",
                                     sequenceCount));
    dataset.documentStarts_.push_back(sequenceStarts[value]);
    previous = value;
  }
  if (static_cast<uint64_t>(previous) != sequenceCount)
    return check.fail(
        absl::StrCat("document_indices[", documentCount - 1, "] = ", previous,
                     " does not end at sequence_count ", sequenceCount));
  dataset.data_ = std::move(*data);
  return dataset;
}

} // namespace moe::rt::data
