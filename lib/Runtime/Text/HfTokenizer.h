//===- HfTokenizer.h - HF tokenizer.json with a BPE model -------*- C++ -*-===//
//
// The parts of an HF tokenizer.json that moe's tokenizers implement, as
// loaded by HfJson.cpp, and the tokenizer that runs them in HF's order:
// added tokens split out of the raw text, normalizer, added tokens split out
// of the normalized text, pre-tokenizer, BPE model, post-processor.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_TEXT_HFTOKENIZER_H
#define MOE_LIB_RUNTIME_TEXT_HFTOKENIZER_H

#include "moe/Runtime/Text/Bpe.h"
#include "moe/Runtime/Text/RegexSplitter.h"
#include "moe/Runtime/Text/Tokenizer.h"

#include "absl/container/flat_hash_map.h"

#include <memory>

namespace moe::rt::text {

struct AddedToken {
  std::string content;
  /// The id HF gives it (the vocabulary's, or the next free one), which
  /// need not be the file's.
  int64_t id = 0;
  bool special = false;
  bool singleWord = false;
  bool lstrip = false;
  bool rstrip = false;
  /// Matched in the normalized text rather than the raw text.
  bool normalized = false;
  /// What is matched: the content, normalized when `normalized` (HF matches
  /// the normalizer's output of the content).
  std::string match;
};

/// Where Metaspace puts its replacement before a piece.
enum class PrependScheme { First, Always, Never };

/// A Unicode normalization form (UAX #15).
enum class UnicodeForm { NFC, NFD, NFKC, NFKD };

struct NormalizerStep {
  enum class Kind { Prepend, Replace, Unicode } kind;
  /// Prepend: what is prepended; Replace: what replaces each match.
  std::string text;
  std::shared_ptr<RegexSplitter> pattern;
  UnicodeForm form = UnicodeForm::NFC;
  /// Where it is in the file ("normalizer.normalizers[1]").
  std::string field;
};

/// `text` in normalization form `form` (through utf8proc); malformed UTF-8
/// is first replaced as utf8Lossy does.
std::string normalizeUnicode(std::string_view text, UnicodeForm form);

struct PreTokenizerStep {
  enum class Kind { ByteLevel, Split, Metaspace } kind;
  bool addPrefixSpace = false;
  bool useRegex = true;
  /// Split's pattern, or ByteLevel's GPT-2 regex.
  std::shared_ptr<RegexSplitter> splitter;
  std::string replacement;
  PrependScheme prependScheme = PrependScheme::Always;
  bool split = true;
};

struct DecoderStep {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace };
  Kind kind;
  std::shared_ptr<RegexSplitter> pattern;
  /// Replace: the replacement; Strip and Metaspace: the character.
  std::string content;
  int64_t start = 0;
  int64_t stop = 0;
  PrependScheme prependScheme = PrependScheme::Always;
};

/// One item of TemplateProcessing's "single": the sequence, or the ids of a
/// special token.
struct TemplateItem {
  bool isSequence = false;
  std::vector<int64_t> ids;
};

struct HfTokenizerParts {
  std::string path;
  std::vector<AddedToken> addedTokens;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> preTokenizer;
  std::optional<BpeModel> model;
  std::vector<DecoderStep> decoder;
  bool hasDecoder = false;
  std::vector<TemplateItem> singleTemplate;
  bool hasTemplate = false;
  std::optional<int64_t> bosId;
  std::optional<int64_t> eosId;
  /// What was read differently from the file's letter, as HF reads it (an
  /// added token's id), for the tools to print.
  std::vector<std::string> warnings;
};

/// Reads and checks a tokenizer.json (and the bos and eos tokens of a
/// tokenizer_config.json beside it, if there is one).
absl::StatusOr<HfTokenizerParts> loadHfTokenizerParts(const std::string &path);

/// The text of `tokens` after `steps`, as HF's decoders give it.
std::string runDecoders(const std::vector<DecoderStep> &steps,
                        std::vector<std::string> tokens);

class HfTokenizer : public Tokenizer {
public:
  explicit HfTokenizer(HfTokenizerParts parts);

  absl::StatusOr<std::vector<int64_t>>
  encode(std::string_view text, bool addSpecialTokens,
         int64_t *droppedCharacters) const override;
  absl::StatusOr<std::string> decode(const std::vector<int64_t> &ids,
                                     bool skipSpecialTokens) const override;
  int64_t vocabSize() const override { return vocabSize_; }
  std::optional<int64_t> bosId() const override { return parts_.bosId; }
  std::optional<int64_t> eosId() const override { return parts_.eosId; }
  const std::string &path() const override { return parts_.path; }
  const std::vector<std::string> &warnings() const override {
    return parts_.warnings;
  }

private:
  /// A stretch of text, or an added token found in it.
  struct Segment {
    std::string text;
    std::optional<int64_t> id;
    /// Starts at offset 0 of the original text (Metaspace's "first").
    bool atStart = false;
  };
  void splitAddedTokens(std::vector<Segment> &segments, bool normalized) const;
  /// The normalizers' text of `text`. `atStart` says whether its first
  /// character comes from offset 0 of the original text (what Metaspace's
  /// "first" asks), which a Replace at the start changes as HF's
  /// alignments do.
  std::string normalize(std::string text, bool *atStart = nullptr) const;
  std::vector<Segment> preTokenize(std::vector<Segment> pieces) const;

  HfTokenizerParts parts_;
  int64_t vocabSize_ = 0;
  absl::flat_hash_map<int64_t, const AddedToken *> addedById_;
};

} // namespace moe::rt::text

#endif // MOE_LIB_RUNTIME_TEXT_HFTOKENIZER_H
