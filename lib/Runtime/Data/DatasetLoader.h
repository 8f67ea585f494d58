//===- DatasetLoader.h - open flat and Megatron token files -----*- C++ -*-===//
//
// Internal to moe_runtime_data: builds a TokenDataset's segments and
// document table from a verified file (TokenDataset befriends it).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_DATA_DATASETLOADER_H
#define MOE_LIB_RUNTIME_DATA_DATASETLOADER_H

#include "moe/Runtime/Data/TokenDataset.h"

namespace moe::rt::data {

class DatasetLoader {
public:
  /// A flat file of `dtype` ids.
  static absl::StatusOr<TokenDataset> openFlat(const std::string &path,
                                               TokenDtype dtype);
  /// A Megatron MMIDIDX index and its data file.
  static absl::StatusOr<TokenDataset> openMegatron(const MegatronPaths &paths);
};

} // namespace moe::rt::data

#endif // MOE_LIB_RUNTIME_DATA_DATASETLOADER_H
