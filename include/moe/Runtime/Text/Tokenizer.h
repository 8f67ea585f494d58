//===- Tokenizer.h - text to token ids and back -----------------*- C++ -*-===//
//
// The tokenizers of the runtime: Hugging Face tokenizer.json files with a BPE
// model (byte-level BPE as in GPT-2, Llama 3 and Qwen; SentencePiece-style
// BPE with byte fallback as in Llama 2 and Mistral) and SentencePiece .model
// files. encode() gives the ids HF's `Tokenizer.encode(text).ids` (or
// SentencePiece's `encode(text)`) gives; decode() is HF's `decode(ids)`.
//
// A Tokenizer is immutable once loaded, so threads may share one.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TEXT_TOKENIZER_H
#define MOE_RUNTIME_TEXT_TOKENIZER_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::rt::text {

class Tokenizer {
public:
  virtual ~Tokenizer() = default;

  /// Loads an HF tokenizer.json or a SentencePiece model, told apart by
  /// their content (a JSON object, or a protobuf message), not their name:
  /// mistral-common names its models tokenizer.model.v1. Errors name the
  /// file and, for JSON, the field; every type or option the loader does not
  /// implement is an error listing what it does implement.
  static absl::StatusOr<std::unique_ptr<Tokenizer>>
  load(const std::string &path);

  /// The ids of `text`. `addSpecialTokens` applies the post-processor (HF's
  /// TemplateProcessing, e.g. a leading bos), as HF's encode() does by
  /// default; SentencePiece models add nothing, as their encode() does not.
  /// `droppedCharacters`, when given, is increased by the characters that
  /// had no token and were left out, as HF does when a BPE model has
  /// neither an unk token nor byte fallback (never for SentencePiece,
  /// which always has unk).
  virtual absl::StatusOr<std::vector<int64_t>>
  encode(std::string_view text, bool addSpecialTokens = true,
         int64_t *droppedCharacters = nullptr) const = 0;

  /// The text of `ids`; an id outside [0, vocabSize()) is an error naming
  /// its position. Special tokens are left out when `skipSpecialTokens`, the
  /// default of HF's decode().
  virtual absl::StatusOr<std::string>
  decode(const std::vector<int64_t> &ids,
         bool skipSpecialTokens = true) const = 0;

  /// One past the largest id, added tokens included.
  virtual int64_t vocabSize() const = 0;
  virtual std::optional<int64_t> bosId() const = 0;
  virtual std::optional<int64_t> eosId() const = 0;
  /// The file it was loaded from.
  virtual const std::string &path() const = 0;
  /// Where the file was read as HF's tokenizers reads it rather than as it
  /// says (e.g. an added token whose id HF changes), one line each, for the
  /// tools to print as warnings.
  virtual const std::vector<std::string> &warnings() const;
};

} // namespace moe::rt::text

#endif // MOE_RUNTIME_TEXT_TOKENIZER_H
