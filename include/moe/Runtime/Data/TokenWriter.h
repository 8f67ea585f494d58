//===- TokenWriter.h - write flat and Megatron token files ------*- C++ -*-===//
//
// The writing side of TokenDataset. Files are written atomically (temporary
// file + rename); a Megatron dataset writes its .bin before its .idx, so a
// reader that finds the index finds the data it describes.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_DATA_TOKENWRITER_H
#define MOE_RUNTIME_DATA_TOKENWRITER_H

#include "moe/Runtime/Data/TokenDataset.h"

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::data {

/// Writes `tokens` to `path` as little-endian `dtype` ids. Every id must fit
/// the dtype; the first that does not is an error naming its position.
absl::Status writeFlatTokens(const std::string &path,
                             const std::vector<int64_t> &tokens,
                             TokenDtype dtype = TokenDtype::UInt16);

/// Writes a Megatron indexed dataset (MMIDIDX version 1) holding one
/// sequence per document. `path` is the prefix or the prefix's .bin or .idx
/// (see megatronPathsFor). UInt32 has no Megatron code and is rejected.
absl::Status
writeMegatronDataset(const std::string &path,
                     const std::vector<std::vector<int64_t>> &documents,
                     TokenDtype dtype = TokenDtype::UInt16);

} // namespace moe::rt::data

#endif // MOE_RUNTIME_DATA_TOKENWRITER_H
