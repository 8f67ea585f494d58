//===- Safetensors.cpp - safetensors dtypes and result accessors ----------===//
#include "moe/Runtime/IO/Safetensors.h"

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

} // namespace moe::rt::io
