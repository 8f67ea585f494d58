//===- SafetensorsWriter.cpp - write typed tensors as safetensors ---------===//
//
// Tensors are laid out in the order given, back to back from offset 0. The
// header lists "__metadata__" first (omitted when empty), then the tensors
// with keys dtype, shape, data_offsets, and is padded with spaces to a
// multiple of 8 bytes, as the reference implementation does. The tensor data
// is streamed from the caller's memory, never copied whole.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/IO/Safetensors.h"
#include "moe/Runtime/DType.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include <limits>
#include <set>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this host is not");

namespace moe::rt::io {

namespace {

using OrderedJson = nlohmann::ordered_json;

absl::Status writeError(const std::string &origin, const std::string &what) {
  return absl::InvalidArgumentError(
      absl::StrCat("cannot write safetensors '", origin, "': ", what));
}

/// Checks one tensor and returns its size in bytes.
absl::StatusOr<uint64_t> checkTensor(const TensorView &tensor,
                                     std::set<std::string> &seen,
                                     const std::string &origin) {
  std::string prefix = absl::StrCat("tensor '", tensor.name, "': ");
  if (tensor.name.empty())
    return writeError(origin, "a tensor has an empty name");
  if (tensor.name == "__metadata__")
    return writeError(origin, prefix + "the name is reserved for metadata");
  if (!seen.insert(tensor.name).second)
    return writeError(origin, prefix + "duplicate tensor name");
  // Any dtype an artifact buffer can hold, written as it is in memory.
  std::optional<DType> dtype = dtypeFromSafetensors(tensor.dtype);
  if (!dtype) {
    std::string known;
    for (const DTypeInfo &info : kDTypes)
      absl::StrAppend(&known, known.empty() ? "" : ", ", info.safetensors);
    return writeError(origin,
                      absl::StrCat(prefix, "unsupported dtype '", tensor.dtype,
                                   "' (the writer writes ", known, ")"));
  }
  uint64_t elements = 1;
  for (int64_t dim : tensor.shape) {
    if (dim < 0)
      return writeError(origin,
                        absl::StrCat(prefix, "negative dimension ", dim));
    if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / 8 /
                                   static_cast<uint64_t>(dim))
      return writeError(origin, prefix + "shape is too large");
    elements *= static_cast<uint64_t>(dim);
  }
  if (elements > 0 && tensor.data == nullptr)
    return writeError(origin, prefix + "data is null");
  return elements * dtypeBytes(*dtype);
}

/// The length prefix and the padded JSON header; fills `sizes` with each
/// tensor's size in bytes.
absl::StatusOr<std::string>
encodeHeader(const std::vector<TensorView> &tensors,
             const std::map<std::string, std::string> &metadata,
             const std::string &origin, std::vector<uint64_t> &sizes) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto &[key, value] : metadata)
      meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorView &tensor : tensors) {
    absl::StatusOr<uint64_t> bytes = checkTensor(tensor, seen, origin);
    if (!bytes.ok())
      return bytes.status();
    if (*bytes > std::numeric_limits<uint64_t>::max() / 2 - offset)
      return writeError(origin, "tensors are too large");
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = tensor.dtype;
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = {offset, offset + *bytes};
    header[tensor.name] = std::move(entry);
    offset += *bytes;
    sizes.push_back(*bytes);
  }

  std::string text;
  try {
    text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception &) {
    return writeError(origin,
                      "a tensor name or metadata string is not valid utf-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string bytes;
  uint64_t headerSize = text.size();
  for (int i = 0; i < 8; ++i)
    bytes.push_back(static_cast<char>((headerSize >> (8 * i)) & 0xff));
  return bytes + text;
}

} // namespace

absl::StatusOr<std::string>
encodeSafetensors(const std::vector<TensorView> &tensors,
                  const std::map<std::string, std::string> &metadata) {
  std::vector<uint64_t> sizes;
  absl::StatusOr<std::string> bytes =
      encodeHeader(tensors, metadata, "<memory>", sizes);
  if (!bytes.ok())
    return bytes.status();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i] > 0)
      bytes->append(static_cast<const char *>(tensors[i].data), sizes[i]);
  return bytes;
}

absl::Status
writeSafetensors(const std::string &path,
                 const std::vector<TensorView> &tensors,
                 const std::map<std::string, std::string> &metadata) {
  std::vector<uint64_t> sizes;
  absl::StatusOr<std::string> header =
      encodeHeader(tensors, metadata, path, sizes);
  if (!header.ok())
    return header.status();
  absl::StatusOr<AtomicFile> file = AtomicFile::create(path);
  if (!file.ok())
    return file.status();
  if (absl::Status status = file->write(*header); !status.ok())
    return status;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i] > 0)
      if (absl::Status status = file->write(tensors[i].data, sizes[i]);
          !status.ok())
        return status;
  return file->commit();
}

} // namespace moe::rt::io
