//===- SentencePieceModel.cpp - libsentencepiece behind std types ---------===//
#include "SentencePieceModel.h"

#include <sentencepiece_processor.h>

namespace moe::rt::text {

SentencePieceModel::SentencePieceModel()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel>
SentencePieceModel::load(std::string_view bytes, std::string &error) {
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  sentencepiece::util::Status status =
      model->processor_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    error = status.ToString();
    return nullptr;
  }
  return model;
}

bool SentencePieceModel::encode(std::string_view text, std::vector<int> &ids,
                                std::string &error) const {
  sentencepiece::util::Status status = processor_->Encode(text, &ids);
  if (!status.ok())
    error = status.ToString();
  return status.ok();
}

bool SentencePieceModel::decode(const std::vector<int> &ids, std::string &text,
                                std::string &error) const {
  sentencepiece::util::Status status = processor_->Decode(ids, &text);
  if (!status.ok())
    error = status.ToString();
  return status.ok();
}

int SentencePieceModel::pieceSize() const { return processor_->GetPieceSize(); }
int SentencePieceModel::bosId() const { return processor_->bos_id(); }
int SentencePieceModel::eosId() const { return processor_->eos_id(); }
bool SentencePieceModel::isControl(int id) const {
  return processor_->IsControl(id);
}
std::string SentencePieceModel::idToPiece(int id) const {
  return processor_->IdToPiece(id);
}

} // namespace moe::rt::text
