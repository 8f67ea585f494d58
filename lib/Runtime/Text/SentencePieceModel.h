//===- SentencePieceModel.h - libsentencepiece behind std types -*- C++ -*-===//
//
// Debian's sentencepiece_processor.h declares its own namespace absl with
// a string_view that clashes with Abseil's, so it is included only in
// SentencePieceModel.cpp, which sees no Abseil header, and this class passes
// std types across.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_TEXT_SENTENCEPIECEMODEL_H
#define MOE_LIB_RUNTIME_TEXT_SENTENCEPIECEMODEL_H

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace moe::rt::text {

class SentencePieceModel {
public:
  /// The model serialized in `bytes`, or null with `error` set.
  static std::unique_ptr<SentencePieceModel> load(std::string_view bytes,
                                                  std::string &error);
  ~SentencePieceModel();

  /// False with `error` set on failure.
  bool encode(std::string_view text, std::vector<int> &ids,
              std::string &error) const;
  bool decode(const std::vector<int> &ids, std::string &text,
              std::string &error) const;
  int pieceSize() const;
  /// -1 where the model has no such piece.
  int bosId() const;
  int eosId() const;
  bool isControl(int id) const;
  std::string idToPiece(int id) const;

private:
  SentencePieceModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

} // namespace moe::rt::text

#endif // MOE_LIB_RUNTIME_TEXT_SENTENCEPIECEMODEL_H
