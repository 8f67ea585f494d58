//===- SentencePieceTokenizer.cpp - .model files through libsentencepiece -===//
#include "SentencePieceTokenizer.h"

#include "SentencePieceModel.h"

#include "moe/Runtime/IO/File.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::text {

namespace {

class SentencePieceTokenizer : public Tokenizer {
public:
  SentencePieceTokenizer(std::string path,
                         std::unique_ptr<SentencePieceModel> model)
      : path_(std::move(path)), model_(std::move(model)) {}

  absl::StatusOr<std::vector<int64_t>>
  encode(std::string_view text, bool /*addSpecialTokens*/,
         int64_t * /*droppedCharacters*/) const override {
    std::vector<int> ids;
    std::string error;
    if (!model_->encode(text, ids, error))
      return absl::InvalidArgumentError(
          absl::StrCat("sentencepiece model '", path_, "': ", error));
    return std::vector<int64_t>(ids.begin(), ids.end());
  }

  absl::StatusOr<std::string> decode(const std::vector<int64_t> &ids,
                                     bool skipSpecialTokens) const override {
    std::string out;
    std::vector<int> pieces;
    auto flush = [&]() -> absl::Status {
      std::string text;
      std::string error;
      if (!model_->decode(pieces, text, error))
        return absl::InvalidArgumentError(
            absl::StrCat("sentencepiece model '", path_, "': ", error));
      out += text;
      pieces.clear();
      return absl::OkStatus();
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocabSize())
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", ids[i], " at position ", i,
                         " is outside the vocabulary [0, ", vocabSize(),
                         ") of tokenizer '", path_, "'"));
      int id = static_cast<int>(ids[i]);
      // SentencePiece decodes control pieces (bos, eos) to nothing; kept,
      // they are spelled out.
      if (!skipSpecialTokens && model_->isControl(id)) {
        if (absl::Status status = flush(); !status.ok())
          return status;
        out += model_->idToPiece(id);
        continue;
      }
      pieces.push_back(id);
    }
    if (absl::Status status = flush(); !status.ok())
      return status;
    return out;
  }

  int64_t vocabSize() const override { return model_->pieceSize(); }
  std::optional<int64_t> bosId() const override {
    return optionalId(model_->bosId());
  }
  std::optional<int64_t> eosId() const override {
    return optionalId(model_->eosId());
  }
  const std::string &path() const override { return path_; }

private:
  static std::optional<int64_t> optionalId(int id) {
    return id >= 0 ? std::optional<int64_t>(id) : std::nullopt;
  }

  std::string path_;
  std::unique_ptr<SentencePieceModel> model_;
};

} // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>>
loadSentencePieceTokenizer(const std::string &path) {
  // Opened by the runtime first, for its errors on missing files and FIFOs.
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path, "tokenizer");
  if (!file.ok())
    return file.status();
  std::string error;
  std::unique_ptr<SentencePieceModel> model = SentencePieceModel::load(
      std::string_view(reinterpret_cast<const char *>(file->data()),
                       file->size()),
      error);
  if (!model)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load sentencepiece model '", path, "': ", error));
  return std::unique_ptr<Tokenizer>(
      new SentencePieceTokenizer(path, std::move(model)));
}

} // namespace moe::rt::text
