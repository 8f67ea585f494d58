//===- WriteCorpus.cpp - write tokenized documents as a token file --------===//
#include "Commands.h"

#include "moe/Runtime/Data/TextCorpus.h"
#include "moe/Runtime/Data/TokenWriter.h"

namespace moe::tools {

using namespace rt::data;

absl::Status writeTokenDocuments(const std::vector<std::vector<int64_t>> &ids,
                                 const OutputOptions &options,
                                 std::ostream &out) {
  int64_t tokens = 0;
  for (const std::vector<int64_t> &document : ids)
    tokens += static_cast<int64_t>(document.size());
  if (options.format == DatasetFormat::Megatron) {
    if (absl::Status status =
            writeMegatronDataset(options.path, ids, options.dtype);
        !status.ok())
      return status;
    MegatronPaths paths = megatronPathsFor(options.path);
    out << "wrote " << tokens << " tokens in " << ids.size() << " documents to "
        << paths.bin << " and " << paths.idx << " (megatron, "
        << tokenDtypeName(options.dtype) << ")\n";
    return absl::OkStatus();
  }
  std::vector<int64_t> stream;
  stream.reserve(tokens);
  for (const std::vector<int64_t> &document : ids)
    stream.insert(stream.end(), document.begin(), document.end());
  if (absl::Status status =
          writeFlatTokens(options.path, stream, options.dtype);
      !status.ok())
    return status;
  out << "wrote " << tokens << " tokens to " << options.path << " (flat, "
      << tokenDtypeName(options.dtype) << ")\n";
  return absl::OkStatus();
}

absl::Status writeByteCorpus(const std::vector<std::string> &documents,
                             const OutputOptions &options, std::ostream &out) {
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(documents.size());
  for (const std::string &document : documents)
    ids.push_back(byteTokens(document));
  return writeTokenDocuments(ids, options, out);
}

} // namespace moe::tools
