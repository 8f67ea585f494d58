//===- TokenWriter.cpp - write flat and Megatron token files --------------===//
#include "moe/Runtime/Data/TokenWriter.h"

#include "absl/strings/str_cat.h"

#include <cstring>
#include <limits>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian; this host is not");

namespace moe::rt::data {

namespace {

/// Appends `tokens` to `out` as `dtype` ids; on an id that does not fit,
/// returns its index in `tokens`, else -1.
int64_t appendIds(std::string &out, const std::vector<int64_t> &tokens,
                  TokenDtype dtype) {
  int64_t lo = tokenDtypeMin(dtype);
  int64_t hi = tokenDtypeMax(dtype);
  size_t itemSize = tokenDtypeSize(dtype);
  size_t base = out.size();
  out.resize(base + tokens.size() * itemSize);
  char *dst = out.data() + base;
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t id = tokens[i];
    if (id < lo || id > hi)
      return static_cast<int64_t>(i);
    // Little-endian: the low itemSize bytes of the int64 are the id.
    std::memcpy(dst + i * itemSize, &id, itemSize);
  }
  return -1;
}

template <typename T> void appendValue(std::string &out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

absl::Status writeBytes(const std::string &path, const std::string &bytes) {
  absl::StatusOr<io::AtomicFile> file = io::AtomicFile::create(path);
  if (!file.ok())
    return file.status();
  if (absl::Status status = file->write(bytes); !status.ok())
    return status;
  return file->commit();
}

absl::Status idError(const std::string &path, int64_t id,
                     const std::string &where, TokenDtype dtype) {
  return absl::InvalidArgumentError(
      absl::StrCat("cannot write '", path, "': token id ", id, " at ", where,
                   " does not fit ", tokenDtypeName(dtype)));
}

} // namespace

absl::Status writeFlatTokens(const std::string &path,
                             const std::vector<int64_t> &tokens,
                             TokenDtype dtype) {
  std::string bytes;
  int64_t bad = appendIds(bytes, tokens, dtype);
  if (bad >= 0)
    return idError(path, tokens[bad], absl::StrCat("position ", bad), dtype);
  return writeBytes(path, bytes);
}

absl::Status
writeMegatronDataset(const std::string &path,
                     const std::vector<std::vector<int64_t>> &documents,
                     TokenDtype dtype) {
  MegatronPaths paths = megatronPathsFor(path);
  std::optional<uint8_t> code = megatronCodeOf(dtype);
  if (!code)
    return absl::InvalidArgumentError(absl::StrCat("cannot write '", paths.idx,
                                                   "': megatron datasets have "
                                                   "no ",
                                                   tokenDtypeName(dtype),
                                                   " dtype (use int32)"));

  std::string data;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::vector<int64_t> &document = documents[d];
    if (document.size() >
        static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot write '", paths.bin, "': document ", d, " has ",
          document.size(), " tokens, more than int32 lengths hold"));
    pointers.push_back(static_cast<int64_t>(data.size()));
    lengths.push_back(static_cast<int32_t>(document.size()));
    int64_t bad = appendIds(data, document, dtype);
    if (bad >= 0)
      return idError(paths.bin, document[bad],
                     absl::StrCat("document ", d, ", position ", bad), dtype);
  }

  std::string index("MMIDIDX\0\0", 9);
  appendValue<uint64_t>(index, 1);
  appendValue<uint8_t>(index, *code);
  appendValue<uint64_t>(index, documents.size());
  appendValue<uint64_t>(index, documents.size() + 1);
  for (int32_t length : lengths)
    appendValue(index, length);
  for (int64_t pointer : pointers)
    appendValue(index, pointer);
  for (size_t d = 0; d <= documents.size(); ++d)
    appendValue<int64_t>(index, static_cast<int64_t>(d));

  if (absl::Status status = writeBytes(paths.bin, data); !status.ok())
    return status;
  return writeBytes(paths.idx, index);
}

} // namespace moe::rt::data
