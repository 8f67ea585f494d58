//===- FlatLoader.cpp - open a flat file of token ids ---------------------===//
//
// A flat file is nothing but ids: its size must be a multiple of the dtype's
// size, and it is one document and one sequence (none if empty).
//
//===----------------------------------------------------------------------===//
#include "DatasetLoader.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::data {

absl::StatusOr<TokenDataset> DatasetLoader::openFlat(const std::string &path,
                                                     TokenDtype dtype) {
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path);
  if (!file.ok())
    return file.status();
  uint64_t itemSize = tokenDtypeSize(dtype);
  if (file->size() % itemSize != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", path, "': size ", file->size(),
                     " bytes is not a multiple of the ", tokenDtypeName(dtype),
                     " token size ", itemSize));

  TokenDataset dataset;
  dataset.format_ = DatasetFormat::Flat;
  dataset.dtype_ = dtype;
  dataset.numTokens_ = static_cast<int64_t>(file->size() / itemSize);
  if (dataset.numTokens_ > 0) {
    dataset.numSequences_ = 1;
    dataset.segments_.push_back({0, 0, dataset.numTokens_});
    dataset.documentStarts_.push_back(dataset.numTokens_);
  }
  dataset.data_ = std::move(*file);
  return dataset;
}

} // namespace moe::rt::data
