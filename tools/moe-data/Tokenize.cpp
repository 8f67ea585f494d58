//===- Tokenize.cpp - moe-data tokenize: byte-level tokens of a file ------===//
//
// For Megatron output, each paragraph (text up to and including a run of two
// or more newlines) becomes a document; the token stream is the file's bytes
// in either format.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "moe/Runtime/Data/TextCorpus.h"
#include "moe/Runtime/IO/File.h"

namespace moe::tools {

absl::Status runTokenize(const TokenizeOptions &options, std::ostream &out) {
  absl::StatusOr<rt::io::MappedFile> file =
      rt::io::MappedFile::open(options.input);
  if (!file.ok())
    return file.status();
  std::string text(reinterpret_cast<const char *>(file->data()), file->size());
  std::vector<std::string> documents;
  if (options.output.format == rt::data::DatasetFormat::Megatron)
    documents = rt::data::splitParagraphs(text);
  else
    documents.push_back(std::move(text));
  return writeByteCorpus(documents, options.output, out);
}

} // namespace moe::tools
