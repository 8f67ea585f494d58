//===- TokenDataset.cpp - open a token stream and read ids from it --------===//
//
// Reads go segment by segment; within a segment the ids are decoded by a
// loop specialised for the dtype. Ids are range-checked as they are read, so
// a bad id is reported with its stream position before any kernel sees it.
//
// checkVocab checks the whole stream once, before training: the threads
// each take an equal share of the stream positions and test blocks of ids
// with one branch-free comparison per id (which the compiler vectorises),
// looking for the exact id only in a block that holds a bad one. The first
// bad id in stream order is reported, whatever the number of threads.
//
//===----------------------------------------------------------------------===//
#include "DatasetLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

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

/// Calls `f(T{})` with T the C++ type of `dtype`'s ids.
template <typename F> int64_t withIdType(TokenDtype dtype, F &&f) {
  switch (dtype) {
  case TokenDtype::UInt8:
    return f(uint8_t{});
  case TokenDtype::Int8:
    return f(int8_t{});
  case TokenDtype::Int16:
    return f(int16_t{});
  case TokenDtype::Int32:
    return f(int32_t{});
  case TokenDtype::Int64:
    return f(int64_t{});
  case TokenDtype::UInt16:
    return f(uint16_t{});
  case TokenDtype::UInt32:
    return f(uint32_t{});
  }
  return -1;
}

template <typename Visit>
int64_t visitIds(TokenDtype dtype, const uint8_t *src, int64_t count,
                 Visit &&visit) {
  return withIdType(dtype, [&](auto id) {
    return visitIds<decltype(id)>(src, count, visit);
  });
}

/// The index of the first of `count` ids of type T at `src` outside
/// [0, limit), or -1.
template <typename T>
int64_t firstOutside(const uint8_t *src, int64_t count, int64_t limit) {
  using Unsigned = std::make_unsigned_t<T>;
  // Ids compared as unsigned: a negative id becomes a large one.
  uint64_t bound = std::min<uint64_t>(
      static_cast<uint64_t>(limit),
      static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1);
  if (bound > std::numeric_limits<Unsigned>::max())
    return -1; // every id of an unsigned T fits
  Unsigned threshold = static_cast<Unsigned>(bound);
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    const uint8_t *block = src + start * sizeof(T);
    Unsigned largest = 0;
    for (int64_t i = 0; i < n; ++i) {
      Unsigned id;
      std::memcpy(&id, block + i * sizeof(T), sizeof(T));
      largest = std::max(largest, id);
    }
    if (largest < threshold)
      continue;
    for (int64_t i = 0; i < n; ++i) {
      Unsigned id;
      std::memcpy(&id, block + i * sizeof(T), sizeof(T));
      if (id >= threshold)
        return start + i;
    }
  }
  return -1;
}

int64_t firstOutside(TokenDtype dtype, const uint8_t *src, int64_t count,
                     int64_t limit) {
  return withIdType(dtype, [&](auto id) {
    return firstOutside<decltype(id)>(src, count, limit);
  });
}

/// Tokens below which one thread checks the whole stream (starting threads
/// would cost more than they save).
constexpr int64_t kTokensPerThread = int64_t{1} << 22;

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
      return outsideVocab(pos + done + bad, badId, vocab);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TokenDataset::outsideVocab(int64_t pos, int64_t id,
                                        int64_t vocab) const {
  std::string document;
  if (format_ == DatasetFormat::Megatron) {
    // The document whose tokens [documentStart(d), documentStart(d + 1))
    // hold `pos` (empty documents share their start with the next one).
    auto next = std::upper_bound(documentStarts_.begin(),
                                 documentStarts_.end(), pos);
    document = absl::StrCat(" (document ",
                            next - documentStarts_.begin() - 1, ")");
  }
  return absl::OutOfRangeError(absl::StrCat(
      "dataset '", path(), "': token id ", id, " at position ", pos, document,
      " is outside ",
      vocab > 0 ? absl::StrCat("the vocabulary [0, ", vocab, ")")
                : std::string("[0, 2^31)")));
}

int64_t TokenDataset::firstOutsideVocab(int64_t begin, int64_t end,
                                        int64_t limit) const {
  size_t itemSize = tokenDtypeSize(dtype_);
  for (size_t s = begin < end ? segmentOf(begin) : segments_.size();
       begin < end; ++s) {
    const Segment &segment = segments_[s];
    int64_t first = begin - segment.start;
    int64_t n = std::min(segment.length - first, end - begin);
    int64_t bad = firstOutside(dtype_,
                               data_.data() + segment.byteOffset +
                                   static_cast<uint64_t>(first) * itemSize,
                               n, limit);
    if (bad >= 0)
      return begin + bad;
    begin += n;
  }
  return -1;
}

int64_t TokenDataset::findOutsideVocab(int64_t vocab, int64_t begin,
                                       int64_t end) const {
  int64_t limit = vocab > 0 ? vocab : kInt32Limit;
  int64_t count = end - begin;
  int64_t wanted = std::max<int64_t>(1, count / kTokensPerThread);
  int64_t threads = std::min<int64_t>(
      wanted, std::max<unsigned>(1, std::thread::hardware_concurrency()));
  // Thread t checks the t-th of `threads` near-equal shares of positions.
  std::vector<int64_t> firstBad(static_cast<size_t>(threads), -1);
  auto check = [&](int64_t t) {
    firstBad[t] = firstOutsideVocab(begin + shareBegin(count, threads, t),
                                    begin + shareBegin(count, threads, t + 1),
                                    limit);
  };
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < threads; ++t)
    workers.emplace_back(check, t);
  check(0);
  for (std::thread &worker : workers)
    worker.join();
  for (int64_t pos : firstBad)
    if (pos >= 0)
      return pos;
  return -1;
}

absl::Status TokenDataset::outsideVocabError(int64_t pos,
                                             int64_t vocab) const {
  return outsideVocab(pos, token(pos), vocab);
}

absl::Status TokenDataset::checkVocab(int64_t vocab) const {
  int64_t pos = findOutsideVocab(vocab, 0, numTokens_);
  return pos >= 0 ? outsideVocabError(pos, vocab) : absl::OkStatus();
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
