//===- WriteCorpus.cpp - write byte-level documents as a token file -------===//
#include "Commands.h"

#include "moe/Runtime/Data/TextCorpus.h"
#include "moe/Runtime/Data/TokenWriter.h"

namespace moe::tools {

using namespace rt::data;

absl::Status writeByteCorpus(const std::vector<std::string> &documents,
                             const OutputOptions &options, std::ostream &out) {
  int64_t tokens = 0;
  if (options.format == DatasetFormat::Megatron) {
    std::vector<std::vector<int64_t>> ids;
    ids.reserve(documents.size());
    for (const std::string &document : documents) {
      ids.push_back(byteTokens(document));
      tokens += static_cast<int64_t>(document.size());
    }
    if (absl::Status status =
            writeMegatronDataset(options.path, ids, options.dtype);
        !status.ok())
      return status;
    MegatronPaths paths = megatronPathsFor(options.path);
    out << "wrote " << tokens << " tokens in " << documents.size()
        << " documents to " << paths.bin << " and " << paths.idx
        << " (megatron, " << tokenDtypeName(options.dtype) << ")\n";
    return absl::OkStatus();
  }
  std::string text;
  for (const std::string &document : documents)
    text += document;
  tokens = static_cast<int64_t>(text.size());
  if (absl::Status status =
          writeFlatTokens(options.path, byteTokens(text), options.dtype);
      !status.ok())
    return status;
  out << "wrote " << tokens << " tokens to " << options.path << " (flat, "
      << tokenDtypeName(options.dtype) << ")\n";
  return absl::OkStatus();
}

} // namespace moe::tools
