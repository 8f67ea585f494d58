//===- ByteText.cpp - byte-level tokens and paragraph splitting -----------===//
#include "moe/Runtime/Data/TextCorpus.h"

namespace moe::rt::data {

std::vector<std::string> splitParagraphs(const std::string &text) {
  std::vector<std::string> paragraphs;
  size_t begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '\n') {
      ++i;
      continue;
    }
    size_t run = i;
    while (run < text.size() && text[run] == '\n')
      ++run;
    if (run - i >= 2) {
      paragraphs.push_back(text.substr(begin, run - begin));
      begin = run;
    }
    i = run;
  }
  if (begin < text.size())
    paragraphs.push_back(text.substr(begin));
  return paragraphs;
}

std::vector<int64_t> byteTokens(const std::string &text) {
  std::vector<int64_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

} // namespace moe::rt::data
