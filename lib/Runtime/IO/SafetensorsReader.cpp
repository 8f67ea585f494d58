//===- SafetensorsReader.cpp - verify and decode a safetensors file -------===//
//
// Checks, in order: the length prefix against the file size, the header as
// JSON (an object whose entries are "__metadata__" or tensors with a known,
// supported dtype, a shape of non-negative integers and data_offsets
// [begin, end] matching shape * dtype size), then that the tensors tile the
// data section exactly. Only then is anything decoded.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/IO/Float16.h"
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this host is not");

namespace moe::rt::io {

namespace {

using Json = nlohmann::json;

/// A verified tensor entry, not yet decoded.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

class HeaderChecker {
public:
  HeaderChecker(const std::string &origin, uint64_t dataSize,
                bool acceptFp8 = false)
      : origin_(origin), dataSize_(dataSize), acceptFp8_(acceptFp8) {}

  absl::Status fail(const std::string &what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors '", origin_, "': ", what));
  }
  absl::Status failTensor(const std::string &name,
                          const std::string &what) const {
    return fail(absl::StrCat("tensor '", name, "': ", what));
  }

  absl::Status
  checkMetadata(const Json &value,
                std::map<std::string, std::string> &metadata) const;
  absl::StatusOr<Entry> checkTensor(const std::string &name,
                                    const Json &value) const;
  absl::Status checkLayout(std::vector<Entry> &entries) const;

private:
  /// Reads a non-negative integer that fits int64 into `out`.
  static bool asIndex(const Json &value, uint64_t &out);

  std::string origin_;
  uint64_t dataSize_;
  /// Whether F8_E4M3 tensors are accepted: the mapped reader hands their
  /// bytes to a loader that knows their scales; the decoding reader has
  /// no scales to apply.
  bool acceptFp8_;
};

bool HeaderChecker::asIndex(const Json &value, uint64_t &out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  if (value.is_number_integer()) {
    int64_t signedValue = value.get<int64_t>();
    out = static_cast<uint64_t>(signedValue);
    return signedValue >= 0;
  }
  return false;
}

absl::Status HeaderChecker::checkMetadata(
    const Json &value, std::map<std::string, std::string> &metadata) const {
  if (!value.is_object())
    return fail("'__metadata__' is not a json object");
  for (const auto &[key, item] : value.items()) {
    if (!item.is_string())
      return fail(absl::StrCat("'__metadata__' value of key '", key,
                               "' is not a string"));
    metadata[key] = item.get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<Entry> HeaderChecker::checkTensor(const std::string &name,
                                                 const Json &value) const {
  if (!value.is_object())
    return failTensor(name, "entry is not a json object");
  Entry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end())
    return failTensor(name, "missing field 'dtype'");
  if (!dtype->is_string())
    return failTensor(name, "field 'dtype' is not a string");
  entry.dtype = dtype->get<std::string>();
  static const std::set<std::string> subByte = {"F4", "F6_E2M3", "F6_E3M2"};
  if (safetensorsDtypeSize(entry.dtype) == 0 && !subByte.count(entry.dtype))
    return failTensor(name, absl::StrCat("unknown dtype '", entry.dtype, "'"));
  bool fp8 = acceptFp8_ && entry.dtype == "F8_E4M3";
  if (entry.dtype != "F32" && entry.dtype != "I32" && entry.dtype != "BF16" &&
      entry.dtype != "F16" && !fp8)
    return failTensor(name, absl::StrCat("unsupported dtype '", entry.dtype,
                                         "' (supported: F32, I32, BF16, F16",
                                         acceptFp8_ ? ", F8_E4M3" : "", ")"));
  uint64_t dtypeSize = safetensorsDtypeSize(entry.dtype);

  auto shape = value.find("shape");
  if (shape == value.end())
    return failTensor(name, "missing field 'shape'");
  if (!shape->is_array())
    return failTensor(name, "field 'shape' is not an array");
  uint64_t elements = 1;
  for (size_t i = 0; i < shape->size(); ++i) {
    uint64_t dim;
    if (!asIndex((*shape)[i], dim))
      return failTensor(
          name, absl::StrCat("shape[", i, "] is not a non-negative integer"));
    if (dim != 0 &&
        elements > std::numeric_limits<uint64_t>::max() / dtypeSize / dim)
      return failTensor(name, "shape is too large");
    elements *= dim;
    entry.shape.push_back(static_cast<int64_t>(dim));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end())
    return failTensor(name, "missing field 'data_offsets'");
  if (!offsets->is_array() || offsets->size() != 2)
    return failTensor(name, "field 'data_offsets' is not an array of 2 "
                            "integers");
  if (!asIndex((*offsets)[0], entry.begin) ||
      !asIndex((*offsets)[1], entry.end))
    return failTensor(name, "data_offsets are not non-negative integers");
  std::string range = absl::StrCat("[", entry.begin, ", ", entry.end, "]");
  if (entry.begin > entry.end)
    return failTensor(
        name, absl::StrCat("data_offsets ", range, " end before they begin"));
  if (entry.end > dataSize_)
    return failTensor(name, absl::StrCat("data_offsets ", range,
                                         " extend past the data section (",
                                         dataSize_, " bytes)"));
  uint64_t needed = elements * dtypeSize;
  if (entry.end - entry.begin != needed)
    return failTensor(
        name,
        absl::StrCat("data_offsets ", range, " hold ", entry.end - entry.begin,
                     " bytes but shape [", absl::StrJoin(entry.shape, ", "),
                     "] of ", entry.dtype, " needs ", needed));
  return entry;
}

absl::Status HeaderChecker::checkLayout(std::vector<Entry> &entries) const {
  std::sort(entries.begin(), entries.end(), [](const Entry &a, const Entry &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry *previous = nullptr;
  for (const Entry &entry : entries) {
    if (entry.begin < expected)
      return failTensor(entry.name,
                        absl::StrCat("data_offsets [", entry.begin, ", ",
                                     entry.end, "] overlap tensor '",
                                     previous->name, "'"));
    if (entry.begin > expected)
      return failTensor(entry.name,
                        absl::StrCat("data_offsets [", entry.begin, ", ",
                                     entry.end, "] leave a gap of ",
                                     entry.begin - expected,
                                     " bytes before the tensor"));
    expected = entry.end;
    previous = &entry;
  }
  if (expected != dataSize_)
    return fail(absl::StrCat("data section has ", dataSize_ - expected,
                             " bytes after the last tensor"));
  return absl::OkStatus();
}

TensorData decode(const Entry &entry, const uint8_t *data) {
  TensorData tensor;
  tensor.name = entry.name;
  tensor.dtype = entry.dtype;
  tensor.shape = entry.shape;
  const uint8_t *bytes = data + entry.begin;
  uint64_t size = entry.end - entry.begin;
  if (entry.dtype == "I32") {
    tensor.i32.resize(size / 4);
    if (size)
      std::memcpy(tensor.i32.data(), bytes, size);
  } else if (entry.dtype == "F32") {
    tensor.f32.resize(size / 4);
    if (size)
      std::memcpy(tensor.f32.data(), bytes, size);
  } else {
    bool isBf16 = entry.dtype == "BF16";
    tensor.f32.resize(size / 2);
    for (uint64_t i = 0; i < size / 2; ++i) {
      uint16_t bits =
          static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
      tensor.f32[i] = isBf16 ? bf16ToFloat(bits) : f16ToFloat(bits);
    }
  }
  return tensor;
}

} // namespace

namespace {
/// The verified entries of `size` bytes, their data section and metadata.
struct VerifiedFile {
  std::vector<Entry> entries;
  const uint8_t *dataSection = nullptr;
  std::map<std::string, std::string> metadata;
};

absl::StatusOr<VerifiedFile> verify(const uint8_t *data, size_t size,
                                    const std::string &origin,
                                    bool acceptFp8 = false) {
  HeaderChecker sizeChecker(origin, 0);
  if (size < 8)
    return sizeChecker.fail(
        absl::StrCat("file is too small (", size,
                     " bytes) to hold the 8-byte header length"));
  uint64_t headerSize = 0;
  for (int i = 0; i < 8; ++i)
    headerSize |= static_cast<uint64_t>(data[i]) << (8 * i);
  // A JSON file (an index, a config.json) given where the weights go: its
  // text read as a length is absurd.
  if (headerSize > size - 8 && data[0] == '{')
    return sizeChecker.fail(
        "the file is JSON, not safetensors (which begins with an 8-byte "
        "header length)");
  if (headerSize > size - 8)
    return sizeChecker.fail(absl::StrCat("header length ", headerSize,
                                         " exceeds the ", size - 8,
                                         " bytes after the length field"));
  if (headerSize > kSafetensorsMaxHeaderSize)
    return sizeChecker.fail(absl::StrCat("header length ", headerSize,
                                         " exceeds the limit of ",
                                         kSafetensorsMaxHeaderSize, " bytes"));
  const uint8_t *headerBegin = data + 8;
  if (headerSize == 0 || headerBegin[0] != '{')
    return sizeChecker.fail("header does not start with '{'");

  Json header = Json::parse(headerBegin, headerBegin + headerSize, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded())
    return sizeChecker.fail("header is not valid json");
  if (!header.is_object())
    return sizeChecker.fail("header is not a json object");

  VerifiedFile file;
  file.dataSection = headerBegin + headerSize;
  HeaderChecker checker(origin, size - 8 - headerSize, acceptFp8);
  for (const auto &[key, value] : header.items()) {
    if (key == "__metadata__") {
      if (absl::Status status = checker.checkMetadata(value, file.metadata);
          !status.ok())
        return status;
      continue;
    }
    absl::StatusOr<Entry> entry = checker.checkTensor(key, value);
    if (!entry.ok())
      return entry.status();
    file.entries.push_back(std::move(*entry));
  }
  if (absl::Status status = checker.checkLayout(file.entries); !status.ok())
    return status;
  return file;
}
} // namespace

absl::StatusOr<SafetensorsFile>
parseSafetensors(const uint8_t *data, size_t size, const std::string &origin) {
  absl::StatusOr<VerifiedFile> verified = verify(data, size, origin);
  if (!verified.ok())
    return verified.status();
  SafetensorsFile file;
  file.metadata = std::move(verified->metadata);
  file.tensors.reserve(verified->entries.size());
  for (const Entry &entry : verified->entries)
    file.tensors.push_back(decode(entry, verified->dataSection));
  return file;
}

absl::StatusOr<MappedSafetensors>
MappedSafetensors::open(const std::string &path) {
  absl::StatusOr<MappedFile> mapped = MappedFile::open(path);
  if (!mapped.ok())
    return mapped.status();
  absl::StatusOr<VerifiedFile> verified =
      verify(mapped->data(), mapped->size(), path, /*acceptFp8=*/true);
  if (!verified.ok())
    return verified.status();
  MappedSafetensors file;
  for (Entry &entry : verified->entries) {
    file.index_.emplace(entry.name, file.tensors_.size());
    file.tensors_.push_back({std::move(entry.name), std::move(entry.dtype),
                             std::move(entry.shape),
                             verified->dataSection + entry.begin});
  }
  file.mapped_ = std::make_shared<MappedFile>(std::move(*mapped));
  return file;
}

const MappedSafetensors::Tensor *
MappedSafetensors::find(const std::string &name) const {
  auto found = index_.find(name);
  return found == index_.end() ? nullptr : &tensors_[found->second];
}

const std::string &MappedSafetensors::path() const { return mapped_->path(); }

int64_t MappedSafetensors::Tensor::numElements() const {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  return count;
}

void MappedSafetensors::decode(const Tensor &tensor, int64_t first,
                               int64_t count, float *out) {
  if (tensor.dtype == "F32") {
    std::memcpy(out, tensor.bytes + 4 * first, static_cast<size_t>(count) * 4);
    return;
  }
  bool isBf16 = tensor.dtype == "BF16";
  const uint8_t *bytes = tensor.bytes + 2 * first;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits =
        static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    out[i] = isBf16 ? bf16ToFloat(bits) : f16ToFloat(bits);
  }
}

absl::StatusOr<SafetensorsFile> readSafetensors(const std::string &path) {
  absl::StatusOr<MappedFile> mapped = MappedFile::open(path);
  if (!mapped.ok())
    return mapped.status();
  return parseSafetensors(mapped->data(), mapped->size(), path);
}

} // namespace moe::rt::io
