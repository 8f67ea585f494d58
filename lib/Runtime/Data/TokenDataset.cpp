//===- TokenDataset.cpp - open a token stream and read ids from it --------===//
//
// Reads go segment by segment; within a segment the ids are decoded by a
// loop specialised for the dtype. Ids are range-checked as they are read, so
// a bad id is reported with its stream position before any kernel sees it.
//
//===----------------------------------------------------------------------===//
#include "DatasetLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace moe::rt::data {

namespace {

constexpr int64_t kInt32Limit = int64_t{1} << 31;

/// Visits `count` ids of type T starting at `src`; stops at the first for
/// which `visit(index, id)` returns false and returns its index, or -1.
template <typename T, typename Visit>
int64_t visitIds(const uint8_t *src, int64_t count, Visit &&visit) {
  for (int64_t i = 0; i < count; ++i) {
    T id;
    std::memcpy(&id, src + i * sizeof(T), sizeof(T));
    if (!visit(i, static_cast<int64_t>(id)))
      return i;
  }
  return -1;
}

template <typename Visit>
int64_t visitIds(TokenDtype dtype, const uint8_t *src, int64_t count,
                 Visit &&visit) {
  switch (dtype) {
  case TokenDtype::UInt8:
    return visitIds<uint8_t>(src, count, visit);
  case TokenDtype::Int8:
    return visitIds<int8_t>(src, count, visit);
  case TokenDtype::Int16:
    return visitIds<int16_t>(src, count, visit);
  case TokenDtype::Int32:
    return visitIds<int32_t>(src, count, visit);
  case TokenDtype::Int64:
    return visitIds<int64_t>(src, count, visit);
  case TokenDtype::UInt16:
    return visitIds<uint16_t>(src, count, visit);
  case TokenDtype::UInt32:
    return visitIds<uint32_t>(src, count, visit);
  }
  return -1;
}

} // namespace

absl::StatusOr<TokenDataset> TokenDataset::open(const std::string &path,
                                                const DatasetOptions &options) {
  switch (options.format) {
  case DatasetFormat::Flat:
    return DatasetLoader::openFlat(path, options.flatDtype);
  case DatasetFormat::Megatron:
    return DatasetLoader::openMegatron(megatronPathsFor(path));
  case DatasetFormat::Auto:
    break;
  }
  if (std::optional<MegatronPaths> paths = detectMegatron(path))
    return DatasetLoader::openMegatron(*paths);
  return DatasetLoader::openFlat(path, options.flatDtype);
}

size_t TokenDataset::segmentOf(int64_t pos) const {
  auto it = std::upper_bound(
      segments_.begin(), segments_.end(), pos,
      [](int64_t p, const Segment &segment) { return p < segment.start; });
  return static_cast<size_t>(it - segments_.begin()) - 1;
}

int64_t TokenDataset::token(int64_t pos) const {
  const Segment &segment = segments_[segmentOf(pos)];
  const uint8_t *src =
      data_.data() + segment.byteOffset +
      static_cast<uint64_t>(pos - segment.start) * tokenDtypeSize(dtype_);
  int64_t id = 0;
  visitIds(dtype_, src, 1, [&](int64_t, int64_t value) {
    id = value;
    return true;
  });
  return id;
}

absl::Status TokenDataset::read(int64_t pos, int64_t count, int32_t *out,
                                int64_t vocab) const {
  if (pos < 0 || count < 0 || pos > numTokens_ || count > numTokens_ - pos)
    return absl::OutOfRangeError(
        absl::StrCat("dataset '", path(), "': cannot read ", count,
                     " tokens at position ", pos, " of ", numTokens_));
  int64_t limit = vocab > 0 ? vocab : kInt32Limit;
  size_t itemSize = tokenDtypeSize(dtype_);
  int64_t done = 0;
  for (size_t s = count > 0 ? segmentOf(pos) : segments_.size(); done < count;
       ++s) {
    const Segment &segment = segments_[s];
    int64_t first = pos + done - segment.start;
    int64_t n = std::min(segment.length - first, count - done);
    const uint8_t *src = data_.data() + segment.byteOffset +
                         static_cast<uint64_t>(first) * itemSize;
    int32_t *dst = out + done;
    int64_t badId = 0;
    int64_t bad = visitIds(dtype_, src, n, [&](int64_t i, int64_t id) {
      if (id < 0 || id >= limit) {
        badId = id;
        return false;
      }
      dst[i] = static_cast<int32_t>(id);
      return true;
    });
    if (bad >= 0)
      return absl::OutOfRangeError(absl::StrCat(
          "dataset '", path(), "': token id ", badId, " at position ",
          pos + done + bad, " is outside ",
          vocab > 0 ? absl::StrCat("the vocabulary [0, ", vocab, ")")
                    : std::string("[0, 2^31)")));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TokenDataset::checkVocab(int64_t vocab) const {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int32_t> buffer(static_cast<size_t>(
      std::min<int64_t>(kChunk, std::max<int64_t>(numTokens_, 1))));
  for (int64_t pos = 0; pos < numTokens_; pos += kChunk) {
    int64_t n = std::min(kChunk, numTokens_ - pos);
    if (absl::Status status = read(pos, n, buffer.data(), vocab); !status.ok())
      return status;
  }
  return absl::OkStatus();
}

std::optional<std::pair<int64_t, int64_t>> TokenDataset::idRange() const {
  if (numTokens_ == 0)
    return std::nullopt;
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();
  for (const Segment &segment : segments_)
    visitIds(dtype_, data_.data() + segment.byteOffset, segment.length,
             [&](int64_t, int64_t id) {
               lo = std::min(lo, id);
               hi = std::max(hi, id);
               return true;
             });
  return std::make_pair(lo, hi);
}

} // namespace moe::rt::data
