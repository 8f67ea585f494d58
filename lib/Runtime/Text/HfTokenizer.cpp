//===- HfTokenizer.cpp - encode and decode as HF tokenizers does ----------===//
#include "HfTokenizer.h"

#include "moe/Runtime/Text/ByteLevel.h"
#include "moe/Runtime/Text/Utf8.h"

#include "absl/strings/str_cat.h"
#include "re2/re2.h"

namespace moe::rt::text {

namespace {

/// Rust regex's `\w`, HF's test for single_word tokens: Alphabetic (here
/// letters, letter numbers and the circled and squared letters), marks,
/// decimal digits, connector punctuation and the joiners.
bool isWordCharacter(std::string_view text, size_t pos) {
  static const RE2 word(
      "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{24B6}-\\x{24E9}\\x{1F130}-"
      "\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}\\x{200C}"
      "\\x{200D}]");
  size_t length = utf8CharLength(text, pos);
  return RE2::FullMatch(re2::StringPiece(text.data() + pos, length), word);
}

/// The offset of the last character of `text[0, end)`.
size_t lastCharStart(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80)
    --pos;
  return pos;
}

std::string replaceAll(std::string_view text, const RegexSplitter &pattern,
                       std::string_view content) {
  std::string out;
  size_t last = 0;
  for (auto [begin, end] : pattern.matches(text)) {
    out.append(text.substr(last, begin - last));
    out.append(content);
    last = end;
  }
  out.append(text.substr(last));
  return out;
}

} // namespace

HfTokenizer::HfTokenizer(HfTokenizerParts parts) : parts_(std::move(parts)) {
  vocabSize_ = parts_.model->vocabSize();
  for (AddedToken &token : parts_.addedTokens) {
    vocabSize_ = std::max(vocabSize_, token.id + 1);
    // HF matches a normalized token by its content's normalized form.
    token.match = token.normalized ? normalize(token.content) : token.content;
  }
  for (const AddedToken &token : parts_.addedTokens)
    addedById_[token.id] = &token;
}

void HfTokenizer::splitAddedTokens(std::vector<Segment> &segments,
                                   bool normalized) const {
  std::vector<const AddedToken *> tokens;
  for (const AddedToken &token : parts_.addedTokens)
    if (token.normalized == normalized && !token.match.empty())
      tokens.push_back(&token);
  if (tokens.empty())
    return;
  std::vector<Segment> out;
  for (Segment &segment : segments) {
    if (segment.id) {
      out.push_back(std::move(segment));
      continue;
    }
    std::string_view text = segment.text;
    size_t startOffset = 0;
    size_t pos = 0;
    auto pushText = [&](size_t begin, size_t end) {
      if (begin < end)
        out.push_back(Segment{std::string(text.substr(begin, end - begin)),
                              std::nullopt, segment.atStart && begin == 0});
    };
    while (pos < text.size()) {
      // Leftmost-longest, as HF's Aho-Corasick automaton matches.
      const AddedToken *best = nullptr;
      for (const AddedToken *token : tokens)
        if (text.compare(pos, token->match.size(), token->match) == 0 &&
            (!best || token->match.size() > best->match.size()))
          best = token;
      if (!best) {
        ++pos;
        continue;
      }
      size_t start = pos;
      size_t stop = pos + best->match.size();
      // The next match is searched after this one's content, not after
      // what rstrip takes: HF's matches come from the automaton first, and
      // may then overlap (" " with rstrip on "   " gives "   ", "  ", " ").
      pos = stop;
      if (best->singleWord) {
        bool startSpace =
            start == 0 || !isWordCharacter(text, lastCharStart(text, start));
        bool stopSpace = stop == text.size() || !isWordCharacter(text, stop);
        if (!startSpace || !stopSpace)
          continue;
      }
      if (best->lstrip) {
        size_t newStart = start;
        while (newStart > 0) {
          size_t prev = lastCharStart(text, newStart);
          if (!isUnicodeWhiteSpace(utf8CodePoint(text, prev)))
            break;
          newStart = prev;
        }
        start = std::max(newStart, startOffset);
      }
      if (best->rstrip) {
        while (stop < text.size() &&
               isUnicodeWhiteSpace(utf8CodePoint(text, stop)))
          stop += utf8CharLength(text, stop);
      }
      pushText(startOffset, start);
      // An lstrip token inside what the previous rstrip took is empty, and
      // HF drops empty pieces (or panics, where it would end before it
      // starts).
      if (stop <= start) {
        startOffset = start;
        continue;
      }
      out.push_back(Segment{std::string(text.substr(start, stop - start)),
                            best->id, false});
      startOffset = stop;
    }
    pushText(startOffset, text.size());
  }
  segments = std::move(out);
}

std::string HfTokenizer::normalize(std::string text, bool *atStart) const {
  for (const NormalizerStep &step : parts_.normalizer) {
    switch (step.kind) {
    case NormalizerStep::Kind::Prepend:
      if (!text.empty())
        text = step.text + text;
      break;
    case NormalizerStep::Kind::Replace: {
      // HF aligns a replacement with the last character it replaces, so
      // text that replaces several characters at the start, or none that
      // removes some there, no longer starts at offset 0 of the original.
      if (atStart && *atStart) {
        std::vector<std::pair<size_t, size_t>> found =
            step.pattern->matches(text);
        if (!found.empty() && found[0].first == 0 && found[0].second > 0 &&
            (step.text.empty() || found[0].second > utf8CharLength(text, 0)))
          *atStart = false;
      }
      text = replaceAll(text, *step.pattern, step.text);
      break;
    }
    case NormalizerStep::Kind::Unicode:
      text = normalizeUnicode(text, step.form);
      break;
    }
  }
  return text;
}

std::vector<HfTokenizer::Segment>
HfTokenizer::preTokenize(std::vector<Segment> pieces) const {
  for (const PreTokenizerStep &step : parts_.preTokenizer) {
    std::vector<Segment> out;
    auto pushSplit = [&](const Segment &piece, const RegexSplitter &splitter) {
      bool first = true;
      for (std::string_view part : splitter.splitIsolated(piece.text)) {
        out.push_back(
            Segment{std::string(part), std::nullopt, piece.atStart && first});
        first = false;
      }
    };
    for (Segment &piece : pieces) {
      if (piece.id) {
        out.push_back(std::move(piece));
        continue;
      }
      switch (step.kind) {
      case PreTokenizerStep::Kind::ByteLevel: {
        if (step.addPrefixSpace && piece.text.compare(0, 1, " ") != 0)
          piece.text.insert(0, " ");
        size_t begin = out.size();
        if (step.useRegex)
          pushSplit(piece, *step.splitter);
        else if (!piece.text.empty())
          out.push_back(std::move(piece));
        for (size_t i = begin; i < out.size(); ++i)
          out[i].text = byteLevelEncode(out[i].text);
        break;
      }
      case PreTokenizerStep::Kind::Split:
        pushSplit(piece, *step.splitter);
        break;
      case PreTokenizerStep::Kind::Metaspace: {
        std::string text = replaceAll(piece.text, RegexSplitter::literal(" "),
                                      step.replacement);
        bool startsWithReplacement =
            text.compare(0, step.replacement.size(), step.replacement) == 0;
        if (!startsWithReplacement &&
            (step.prependScheme == PrependScheme::Always ||
             (step.prependScheme == PrependScheme::First && piece.atStart)))
          text.insert(0, step.replacement);
        if (!step.split) {
          if (!text.empty())
            out.push_back(
                Segment{std::move(text), std::nullopt, piece.atStart});
          break;
        }
        // MergedWithNext: each replacement starts a piece.
        size_t begin = 0;
        bool first = true;
        for (size_t at = text.find(step.replacement, 1);
             at != std::string::npos;
             at = text.find(step.replacement, at + step.replacement.size())) {
          if (at > begin) {
            out.push_back(Segment{text.substr(begin, at - begin), std::nullopt,
                                  piece.atStart && first});
            first = false;
          }
          begin = at;
        }
        if (begin < text.size())
          out.push_back(Segment{text.substr(begin), std::nullopt,
                                piece.atStart && first});
        break;
      }
      }
    }
    pieces = std::move(out);
  }
  return pieces;
}

absl::StatusOr<std::vector<int64_t>>
HfTokenizer::encode(std::string_view text, bool addSpecialTokens,
                    int64_t *droppedCharacters) const {
  std::vector<Segment> segments;
  segments.push_back(Segment{std::string(text), std::nullopt, true});
  splitAddedTokens(segments, /*normalized=*/false);
  for (Segment &segment : segments)
    if (!segment.id)
      segment.text = normalize(std::move(segment.text), &segment.atStart);
  splitAddedTokens(segments, /*normalized=*/true);
  segments = preTokenize(std::move(segments));

  std::vector<int64_t> ids;
  for (const Segment &segment : segments) {
    if (segment.id)
      ids.push_back(*segment.id);
    else
      parts_.model->tokenize(segment.text, ids, droppedCharacters);
  }
  if (!addSpecialTokens || !parts_.hasTemplate)
    return ids;
  std::vector<int64_t> templated;
  for (const TemplateItem &item : parts_.singleTemplate) {
    const std::vector<int64_t> &part = item.isSequence ? ids : item.ids;
    templated.insert(templated.end(), part.begin(), part.end());
  }
  return templated;
}

absl::StatusOr<std::string> HfTokenizer::decode(const std::vector<int64_t> &ids,
                                                bool skipSpecialTokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= vocabSize_)
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", i,
                       " is outside the vocabulary [0, ", vocabSize_,
                       ") of tokenizer '", parts_.path, "'"));
    if (auto added = addedById_.find(id); added != addedById_.end()) {
      if (!(skipSpecialTokens && added->second->special))
        tokens.push_back(added->second->content);
      continue;
    }
    const std::string *token = parts_.model->idToken(id);
    if (!token)
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", i,
                       " has no token in tokenizer '", parts_.path, "'"));
    tokens.push_back(*token);
  }
  if (!parts_.hasDecoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i)
      absl::StrAppend(&joined, i ? " " : "", tokens[i]);
    return joined;
  }
  return runDecoders(parts_.decoder, std::move(tokens));
}

} // namespace moe::rt::text
