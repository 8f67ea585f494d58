//===- Safetensors.cpp - safetensors dtypes and result accessors ----------===//
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>

namespace moe::rt::io {

size_t safetensorsDtypeSize(const std::string &dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},     {"BF16", 2},
      {"I32", 4},     {"U32", 4}, {"F32", 4}, {"C64", 8},     {"F64", 8},
      {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

int64_t TensorData::numElements() const {
  int64_t n = 1;
  for (int64_t dim : shape)
    n *= dim;
  return n;
}

const TensorData *SafetensorsFile::find(const std::string &name) const {
  for (const TensorData &tensor : tensors)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

absl::Status checkFinite(const TensorData &tensor, const std::string &origin) {
  return checkFinite(tensor.name, tensor.shape, tensor.f32.data(), 0,
                     static_cast<int64_t>(tensor.f32.size()), origin);
}

absl::Status checkFinite(const std::string &name,
                         const std::vector<int64_t> &shape, const float *values,
                         int64_t first, int64_t count,
                         const std::string &origin) {
  const float *bad = std::find_if(values, values + count,
                                  [](float x) { return !std::isfinite(x); });
  if (bad == values + count)
    return absl::OkStatus();
  int64_t index = first + (bad - values);
  // Row-major coordinates of the flat index.
  std::vector<int64_t> element(shape.size());
  int64_t rest = index;
  for (size_t d = shape.size(); d-- > 0;) {
    element[d] = shape[d] > 0 ? rest % shape[d] : 0;
    rest = shape[d] > 0 ? rest / shape[d] : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      origin, ": tensor '", name, "' holds ", *bad, " at element [",
      absl::StrJoin(element, ", "), "] (flat index ", index, ")"));
}

} // namespace moe::rt::io
