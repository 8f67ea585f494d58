//===- Info.cpp - moe-data info: describe a token dataset -----------------===//
#include "Commands.h"

namespace moe::tools {

using namespace rt::data;

absl::Status runInfo(const InfoOptions &options, std::ostream &out) {
  DatasetOptions datasetOptions;
  datasetOptions.format = options.format;
  datasetOptions.flatDtype = options.dtype;
  absl::StatusOr<TokenDataset> dataset =
      TokenDataset::open(options.path, datasetOptions);
  if (!dataset.ok())
    return dataset.status();
  out << "path: " << dataset->path() << "\n";
  if (!dataset->indexPath().empty())
    out << "index: " << dataset->indexPath() << "\n";
  out << "format: " << datasetFormatName(dataset->format()) << "\n"
      << "dtype: " << tokenDtypeName(dataset->dtype()) << "\n"
      << "tokens: " << dataset->numTokens() << "\n";
  if (dataset->format() == DatasetFormat::Megatron)
    out << "sequences: " << dataset->numSequences() << "\n";
  out << "documents: " << dataset->numDocuments() << "\n";
  if (auto range = dataset->idRange())
    out << "min_id: " << range->first << "\n"
        << "max_id: " << range->second << "\n";
  else
    out << "min_id: -\nmax_id: -\n";
  return absl::OkStatus();
}

} // namespace moe::tools
