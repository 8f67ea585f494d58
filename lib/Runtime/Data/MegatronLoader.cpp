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
//===----------------------------------------------------------------------===//
#include "DatasetLoader.h"

#include "absl/strings/str_cat.h"

#include <cstring>
#include <limits>

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

private:
  const MegatronPaths &paths_;
};

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
