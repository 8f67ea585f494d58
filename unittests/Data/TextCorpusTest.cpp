//===- TextCorpusTest.cpp - byte text and the synthetic corpus ------------===//
#include "moe/Runtime/Data/TextCorpus.h"

#include "gtest/gtest.h"

#include <cmath>
#include <map>

using namespace moe::rt::data;

namespace {

std::string joined(const std::vector<std::string> &pieces) {
  std::string text;
  for (const std::string &piece : pieces)
    text += piece;
  return text;
}

TEST(SynthCorpus, IsDeterministicPerSeedAndExactlySized) {
  std::vector<std::string> a = synthesizeParagraphs(1, 20000);
  std::vector<std::string> b = synthesizeParagraphs(1, 20000);
  std::vector<std::string> c = synthesizeParagraphs(2, 20000);
  EXPECT_EQ(a, b);
  EXPECT_NE(joined(a), joined(c));
  EXPECT_EQ(joined(a).size(), 20000u);
  EXPECT_EQ(joined(synthesizeParagraphs(1, 1)).size(), 1u);
  EXPECT_TRUE(synthesizeParagraphs(1, 0).empty());
  // A shorter corpus is a prefix of a longer one with the same seed.
  std::string shorter = joined(synthesizeParagraphs(1, 5000));
  EXPECT_EQ(joined(a).substr(0, 5000), shorter);
  ASSERT_GT(a.size(), 10u);
  for (size_t i = 0; i + 1 < a.size(); ++i)
    EXPECT_EQ(a[i].back(), '\n');
}

TEST(SynthCorpus, IsPrintableEnglishLikeText) {
  std::string text = joined(synthesizeParagraphs(0, 50000));
  for (char ch : text)
    ASSERT_TRUE(ch == '\n' || (ch >= 32 && ch < 127)) << int(ch);
  EXPECT_NE(text.find("There are "), std::string::npos);
  EXPECT_NE(text.find(" plus "), std::string::npos);
  EXPECT_NE(text.find(" said, \""), std::string::npos);
  EXPECT_NE(text.find("? Yes, "), std::string::npos);
  EXPECT_EQ(text.find("a apple"), std::string::npos);
  EXPECT_EQ(text.find("There are 1 "), std::string::npos);
}

TEST(SynthCorpus, HasMuchLessEntropyThanItsUnigrams) {
  // The per-byte entropy given the previous three bytes is far below the
  // unigram entropy: there is structure for a model to learn.
  std::string text = joined(synthesizeParagraphs(3, 200000));
  std::map<char, double> unigrams;
  std::map<std::string, std::map<char, double>> contexts;
  for (size_t i = 3; i < text.size(); ++i) {
    unigrams[text[i]] += 1;
    contexts[text.substr(i - 3, 3)][text[i]] += 1;
  }
  double n = static_cast<double>(text.size() - 3);
  double unigram = 0;
  for (const auto &[ch, count] : unigrams)
    unigram -= count / n * std::log2(count / n);
  double conditional = 0;
  for (const auto &[context, next] : contexts) {
    double total = 0;
    for (const auto &[ch, count] : next)
      total += count;
    for (const auto &[ch, count] : next)
      conditional -= count / n * std::log2(count / total);
  }
  EXPECT_GT(unigram, 3.5);
  EXPECT_LT(conditional, unigram / 2);
}

TEST(ByteText, SplitsParagraphsLosslessly) {
  std::string text = "one\ntwo\n\nthree\n\n\nfour";
  std::vector<std::string> paragraphs = splitParagraphs(text);
  ASSERT_EQ(paragraphs.size(), 3u);
  EXPECT_EQ(paragraphs[0], "one\ntwo\n\n");
  EXPECT_EQ(paragraphs[1], "three\n\n\n");
  EXPECT_EQ(paragraphs[2], "four");
  EXPECT_EQ(joined(paragraphs), text);
  EXPECT_TRUE(splitParagraphs("").empty());
  EXPECT_EQ(splitParagraphs("\n\n"), std::vector<std::string>{"\n\n"});
  EXPECT_EQ(splitParagraphs("a\n"), std::vector<std::string>{"a\n"});
}

TEST(ByteText, TokensAreUnsignedBytes) {
  std::vector<int64_t> tokens = byteTokens(std::string("A\0\xff\x80", 4));
  EXPECT_EQ(tokens, (std::vector<int64_t>{65, 0, 255, 128}));
}

} // namespace
