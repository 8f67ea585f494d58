//===- Detokenize.cpp - moe-data detokenize: a token dataset to text ------===//
//
// Each document is decoded by itself, the inverse of tokenize, which
// encodes each by itself; the texts are concatenated.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "moe/Runtime/IO/SamePath.h"

#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/Text/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include <iostream>

namespace moe::tools {

using namespace rt::data;

absl::Status runDetokenize(const DetokenizeOptions &options,
                           std::ostream &out) {
  MegatronPaths megatron = megatronPathsFor(options.input);
  const rt::io::FlagPath inputs[] = {{"IN", options.input},
                                     {"IN", megatron.bin},
                                     {"IN", megatron.idx},
                                     {"--tokenizer", options.tokenizer}};
  const rt::io::OutputPath outputs[] = {{{"--out", options.output}}};
  if (absl::Status status = rt::io::checkOutputsAreNotInputs(inputs, outputs);
      !status.ok())
    return status;
  absl::StatusOr<std::unique_ptr<rt::text::Tokenizer>> tokenizer =
      rt::text::Tokenizer::load(options.tokenizer);
  if (!tokenizer.ok())
    return tokenizer.status();
  for (const std::string &warning : (*tokenizer)->warnings())
    std::cerr << "moe-data: warning: " << warning << "\n";
  DatasetOptions datasetOptions;
  datasetOptions.format = options.format;
  datasetOptions.flatDtype = options.dtype;
  absl::StatusOr<TokenDataset> dataset =
      TokenDataset::open(options.input, datasetOptions);
  if (!dataset.ok())
    return dataset.status();
  std::string text;
  for (int64_t d = 0; d < dataset->numDocuments(); ++d) {
    std::vector<int64_t> ids;
    for (int64_t pos = dataset->documentStart(d);
         pos < dataset->documentStart(d + 1); ++pos)
      ids.push_back(dataset->token(pos));
    absl::StatusOr<std::string> decoded =
        (*tokenizer)->decode(ids, !options.keepSpecialTokens);
    if (!decoded.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("dataset '", dataset->path(), "' document ", d, ": ",
                       decoded.status().message()));
    text += *decoded;
  }
  absl::StatusOr<rt::io::AtomicFile> file =
      rt::io::AtomicFile::create(options.output);
  if (!file.ok())
    return file.status();
  if (absl::Status status = file->write(text); !status.ok())
    return status;
  if (absl::Status status = file->commit(); !status.ok())
    return status;
  out << "wrote " << text.size() << " bytes of " << dataset->numTokens()
      << " tokens in " << dataset->numDocuments() << " documents to "
      << options.output << "\n";
  return absl::OkStatus();
}

} // namespace moe::tools
