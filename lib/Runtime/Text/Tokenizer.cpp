//===- Tokenizer.cpp - load a tokenizer by its content --------------------===//
#include "moe/Runtime/Text/Tokenizer.h"

#include "HfTokenizer.h"
#include "SentencePieceTokenizer.h"

#include "moe/Runtime/IO/File.h"

namespace moe::rt::text {

namespace {

enum class TokenizerFormat { HfJson, SentencePiece };

/// JSON when the first byte after white space opens an object or an array;
/// a SentencePiece model when it is the tag of one of ModelProto's
/// length-delimited fields (pieces, trainer_spec, normalizer_spec,
/// self_test_data, denormalizer_spec: 1 to 5); otherwise by the name, so
/// that a broken file gets the error of the loader its name asks for.
TokenizerFormat sniffFormat(const std::string &path, const uint8_t *data,
                            uint64_t size) {
  uint64_t pos = 0;
  while (pos < size && (data[pos] == ' ' || data[pos] == '\t' ||
                        data[pos] == '\n' || data[pos] == '\r'))
    ++pos;
  if (pos < size && (data[pos] == '{' || data[pos] == '['))
    return TokenizerFormat::HfJson;
  if (size > 0 && (data[0] & 7) == 2 && data[0] >> 3 >= 1 && data[0] >> 3 <= 5)
    return TokenizerFormat::SentencePiece;
  const std::string suffix = ".model";
  bool modelName =
      path.size() >= suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  return modelName ? TokenizerFormat::SentencePiece : TokenizerFormat::HfJson;
}

} // namespace

const std::vector<std::string> &Tokenizer::warnings() const {
  static const std::vector<std::string> none;
  return none;
}

absl::StatusOr<std::unique_ptr<Tokenizer>>
Tokenizer::load(const std::string &path) {
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path, "tokenizer");
  if (!file.ok())
    return file.status();
  if (sniffFormat(path, file->data(), file->size()) ==
      TokenizerFormat::SentencePiece)
    return loadSentencePieceTokenizer(path);
  absl::StatusOr<HfTokenizerParts> parts = loadHfTokenizerParts(path);
  if (!parts.ok())
    return parts.status();
  return std::unique_ptr<Tokenizer>(new HfTokenizer(std::move(*parts)));
}

} // namespace moe::rt::text
