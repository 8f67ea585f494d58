//===- Tokenizer.cpp - load a tokenizer by its file -----------------------===//
#include "moe/Runtime/Text/Tokenizer.h"

#include "HfTokenizer.h"
#include "SentencePieceTokenizer.h"

namespace moe::rt::text {

absl::StatusOr<std::unique_ptr<Tokenizer>>
Tokenizer::load(const std::string &path) {
  const std::string suffix = ".model";
  if (path.size() >= suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return loadSentencePieceTokenizer(path);
  absl::StatusOr<HfTokenizerParts> parts = loadHfTokenizerParts(path);
  if (!parts.ok())
    return parts.status();
  return std::unique_ptr<Tokenizer>(new HfTokenizer(std::move(*parts)));
}

} // namespace moe::rt::text
