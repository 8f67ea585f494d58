//===- HfDecoder.cpp - HF's decoders: tokens back to text -----------------===//
//
// Each decoder maps the list of token strings to a new list (HF's
// decode_chain); the text is their concatenation.
//
//===----------------------------------------------------------------------===//
#include "HfTokenizer.h"

#include "moe/Runtime/Text/ByteLevel.h"
#include "moe/Runtime/Text/Utf8.h"

#include "absl/strings/str_join.h"

namespace moe::rt::text {

namespace {

std::vector<std::string> decodeByteLevel(std::vector<std::string> tokens) {
  std::string bytes;
  for (const std::string &token : tokens) {
    // A token with a character that is no byte's (an added token) is kept.
    if (std::optional<std::string> decoded = byteLevelDecode(token))
      bytes += *decoded;
    else
      bytes += token;
  }
  return {utf8Lossy(bytes)};
}

/// `<0xXX>` tokens become their bytes; a run of them that is not UTF-8
/// becomes one U+FFFD per byte, as in HF.
std::vector<std::string> decodeByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string pending;
  size_t pendingCount = 0;
  auto flush = [&] {
    if (pendingCount == 0)
      return;
    if (isValidUtf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pendingCount; ++i)
        out.push_back("\xEF\xBF\xBD");
    }
    pending.clear();
    pendingCount = 0;
  };
  auto hexDigit = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    return -1;
  };
  for (std::string &token : tokens) {
    if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 &&
        token[5] == '>' && hexDigit(token[3]) >= 0 && hexDigit(token[4]) >= 0) {
      pending +=
          static_cast<char>(hexDigit(token[3]) * 16 + hexDigit(token[4]));
      ++pendingCount;
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

/// Up to `start` leading and `stop` trailing copies of `content` removed
/// from each token.
std::vector<std::string> decodeStrip(std::vector<std::string> tokens,
                                     const std::string &content, int64_t start,
                                     int64_t stop) {
  for (std::string &token : tokens) {
    std::vector<size_t> starts;
    for (size_t pos = 0; pos < token.size(); pos += utf8CharLength(token, pos))
      starts.push_back(pos);
    starts.push_back(token.size());
    size_t chars = starts.size() - 1;
    auto isContent = [&](size_t i) {
      return token.compare(starts[i], starts[i + 1] - starts[i], content) == 0;
    };
    size_t startCut = 0;
    for (size_t i = 0; i < chars && static_cast<int64_t>(i) < start; ++i) {
      if (!isContent(i))
        break;
      startCut = i + 1;
    }
    size_t stopCut = chars;
    for (int64_t i = 0; i < stop && static_cast<size_t>(i) < chars; ++i) {
      size_t index = chars - i - 1;
      if (!isContent(index))
        break;
      stopCut = index;
    }
    if (stopCut < startCut)
      stopCut = startCut;
    token = token.substr(starts[startCut], starts[stopCut] - starts[startCut]);
  }
  return tokens;
}

/// Each replacement becomes a space, except in the first token, which loses
/// them all unless the scheme is "never" (HF's Metaspace decoder).
std::vector<std::string> decodeMetaspace(std::vector<std::string> tokens,
                                         const std::string &replacement,
                                         PrependScheme scheme) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string out;
    const std::string &token = tokens[i];
    for (size_t pos = 0; pos < token.size();) {
      if (token.compare(pos, replacement.size(), replacement) == 0) {
        if (!(i == 0 && scheme != PrependScheme::Never))
          out += ' ';
        pos += replacement.size();
        continue;
      }
      out += token[pos++];
    }
    tokens[i] = std::move(out);
  }
  return tokens;
}

} // namespace

std::string runDecoders(const std::vector<DecoderStep> &steps,
                        std::vector<std::string> tokens) {
  for (const DecoderStep &step : steps) {
    switch (step.kind) {
    case DecoderStep::Kind::ByteLevel:
      tokens = decodeByteLevel(std::move(tokens));
      break;
    case DecoderStep::Kind::Replace:
      for (std::string &token : tokens) {
        std::string out;
        size_t last = 0;
        for (auto [begin, end] : step.pattern->matches(token)) {
          out.append(token, last, begin - last);
          out += step.content;
          last = end;
        }
        out.append(token, last, std::string::npos);
        token = std::move(out);
      }
      break;
    case DecoderStep::Kind::ByteFallback:
      tokens = decodeByteFallback(std::move(tokens));
      break;
    case DecoderStep::Kind::Fuse:
      tokens = {absl::StrJoin(tokens, "")};
      break;
    case DecoderStep::Kind::Strip:
      tokens =
          decodeStrip(std::move(tokens), step.content, step.start, step.stop);
      break;
    case DecoderStep::Kind::Metaspace:
      tokens =
          decodeMetaspace(std::move(tokens), step.content, step.prependScheme);
      break;
    }
  }
  return absl::StrJoin(tokens, "");
}

} // namespace moe::rt::text
