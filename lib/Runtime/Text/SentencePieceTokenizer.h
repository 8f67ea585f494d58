//===- SentencePieceTokenizer.h - SentencePiece .model files ----*- C++ -*-===//
#ifndef MOE_LIB_RUNTIME_TEXT_SENTENCEPIECETOKENIZER_H
#define MOE_LIB_RUNTIME_TEXT_SENTENCEPIECETOKENIZER_H

#include "moe/Runtime/Text/Tokenizer.h"

namespace moe::rt::text {

/// A SentencePiece model through libsentencepiece: encode() is its Encode
/// (no bos or eos, as in its Python encode()), decode() its Decode.
absl::StatusOr<std::unique_ptr<Tokenizer>>
loadSentencePieceTokenizer(const std::string &path);

} // namespace moe::rt::text

#endif // MOE_LIB_RUNTIME_TEXT_SENTENCEPIECETOKENIZER_H
