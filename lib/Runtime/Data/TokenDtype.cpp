//===- TokenDtype.cpp - token dtypes, Megatron codes, format names --------===//
#include "moe/Runtime/Data/TokenDataset.h"

#include <limits>

namespace moe::rt::data {

const char *tokenDtypeName(TokenDtype dtype) {
  switch (dtype) {
  case TokenDtype::UInt8:
    return "uint8";
  case TokenDtype::Int8:
    return "int8";
  case TokenDtype::Int16:
    return "int16";
  case TokenDtype::Int32:
    return "int32";
  case TokenDtype::Int64:
    return "int64";
  case TokenDtype::UInt16:
    return "uint16";
  case TokenDtype::UInt32:
    return "uint32";
  }
  return "unknown";
}

std::optional<TokenDtype> parseTokenDtype(const std::string &name) {
  for (TokenDtype dtype :
       {TokenDtype::UInt8, TokenDtype::Int8, TokenDtype::Int16,
        TokenDtype::Int32, TokenDtype::Int64, TokenDtype::UInt16,
        TokenDtype::UInt32})
    if (name == tokenDtypeName(dtype))
      return dtype;
  return std::nullopt;
}

size_t tokenDtypeSize(TokenDtype dtype) {
  switch (dtype) {
  case TokenDtype::UInt8:
  case TokenDtype::Int8:
    return 1;
  case TokenDtype::Int16:
  case TokenDtype::UInt16:
    return 2;
  case TokenDtype::Int32:
  case TokenDtype::UInt32:
    return 4;
  case TokenDtype::Int64:
    return 8;
  }
  return 0;
}

int64_t tokenDtypeMin(TokenDtype dtype) {
  switch (dtype) {
  case TokenDtype::Int8:
    return std::numeric_limits<int8_t>::min();
  case TokenDtype::Int16:
    return std::numeric_limits<int16_t>::min();
  case TokenDtype::Int32:
    return std::numeric_limits<int32_t>::min();
  case TokenDtype::Int64:
    return std::numeric_limits<int64_t>::min();
  default:
    return 0;
  }
}

int64_t tokenDtypeMax(TokenDtype dtype) {
  switch (dtype) {
  case TokenDtype::UInt8:
    return std::numeric_limits<uint8_t>::max();
  case TokenDtype::Int8:
    return std::numeric_limits<int8_t>::max();
  case TokenDtype::Int16:
    return std::numeric_limits<int16_t>::max();
  case TokenDtype::Int32:
    return std::numeric_limits<int32_t>::max();
  case TokenDtype::Int64:
    return std::numeric_limits<int64_t>::max();
  case TokenDtype::UInt16:
    return std::numeric_limits<uint16_t>::max();
  case TokenDtype::UInt32:
    return std::numeric_limits<uint32_t>::max();
  }
  return 0;
}

std::optional<TokenDtype> tokenDtypeFromMegatronCode(uint8_t code) {
  switch (code) {
  case 1:
    return TokenDtype::UInt8;
  case 2:
    return TokenDtype::Int8;
  case 3:
    return TokenDtype::Int16;
  case 4:
    return TokenDtype::Int32;
  case 5:
    return TokenDtype::Int64;
  case 8:
    return TokenDtype::UInt16;
  default:
    return std::nullopt;
  }
}

std::optional<uint8_t> megatronCodeOf(TokenDtype dtype) {
  switch (dtype) {
  case TokenDtype::UInt8:
    return 1;
  case TokenDtype::Int8:
    return 2;
  case TokenDtype::Int16:
    return 3;
  case TokenDtype::Int32:
    return 4;
  case TokenDtype::Int64:
    return 5;
  case TokenDtype::UInt16:
    return 8;
  case TokenDtype::UInt32:
    return std::nullopt;
  }
  return std::nullopt;
}

const char *datasetFormatName(DatasetFormat format) {
  switch (format) {
  case DatasetFormat::Auto:
    return "auto";
  case DatasetFormat::Flat:
    return "flat";
  case DatasetFormat::Megatron:
    return "megatron";
  }
  return "unknown";
}

std::optional<DatasetFormat> parseDatasetFormat(const std::string &name) {
  for (DatasetFormat format :
       {DatasetFormat::Auto, DatasetFormat::Flat, DatasetFormat::Megatron})
    if (name == datasetFormatName(format))
      return format;
  return std::nullopt;
}

} // namespace moe::rt::data
