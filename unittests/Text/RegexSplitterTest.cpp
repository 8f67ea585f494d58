//===- RegexSplitterTest.cpp - HF's regexes on RE2 ------------------------===//
#include "moe/Runtime/Text/RegexSplitter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace moe::rt::text;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

constexpr const char *kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                              "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::vector<std::string> split(const char *pattern, const std::string &text) {
  absl::StatusOr<RegexSplitter> splitter = RegexSplitter::create(pattern);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  std::vector<std::string> pieces;
  for (std::string_view piece : splitter->splitIsolated(text))
    pieces.emplace_back(piece);
  return pieces;
}

TEST(RegexSplitterTest, TopLevelAlternation) {
  EXPECT_THAT(splitTopLevelAlternation("a|(b|c)|[|]|\\||[]|]"),
              ElementsAre("a", "(b|c)", "[|]", "\\|", "[]|]"));
}

TEST(RegexSplitterTest, Gpt2Words) {
  EXPECT_THAT(split(kGpt2, "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(split(kGpt2, "it's 42!"), ElementsAre("it", "'s", " 42", "!"));
}

// \s+(?!\S): a run of spaces before a word gives its last space to the word.
TEST(RegexSplitterTest, SpacesBeforeWordKeepLastSpace) {
  EXPECT_THAT(split(kGpt2, "a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(split(kGpt2, "a b"), ElementsAre("a", " b"));
}

// One space before a non-letter is not matched by the lookahead alternative
// but by " ?[^\s\p{L}\p{N}]+".
TEST(RegexSplitterTest, OneSpaceBeforePunctuation) {
  EXPECT_THAT(split(kGpt2, "a ,"), ElementsAre("a", " ,"));
}

// A run that ends the text is all white space; a lone newline before a
// word is a piece of its own (only " " joins a word).
TEST(RegexSplitterTest, TrailingAndNewlineRuns) {
  EXPECT_THAT(split(kGpt2, "end   "), ElementsAre("end", "   "));
  EXPECT_THAT(split(kGpt2, "a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(split(kGpt2, "a \n"), ElementsAre("a", " \n"));
}

// \s is Unicode White_Space, as in Oniguruma: U+3000 is no punctuation.
TEST(RegexSplitterTest, UnicodeWhiteSpace) {
  EXPECT_THAT(split(kGpt2, "a\u3000\u3000b"),
              ElementsAre("a", "\u3000", "\u3000", "b"));
}

TEST(RegexSplitterTest, UnmatchedTextIsItsOwnPiece) {
  EXPECT_THAT(split("\\p{N}+", "ab12cd"), ElementsAre("ab", "12", "cd"));
}

TEST(RegexSplitterTest, OtherLookaroundIsAnError) {
  absl::StatusOr<RegexSplitter> splitter = RegexSplitter::create("(?<=a)b");
  ASSERT_FALSE(splitter.ok());
  EXPECT_THAT(std::string(splitter.status().message()),
              HasSubstr("regex '(?<=a)b' is not supported"));
  EXPECT_FALSE(RegexSplitter::create("a(?!b)").ok());
  EXPECT_FALSE(RegexSplitter::create("[\\S]").ok());
}

// Oniguruma's ^ and $ are line anchors (HF's pieces of "ab\nb a\nab").
TEST(RegexSplitterTest, AnchorsMatchAtLines) {
  EXPECT_THAT(split("b$", "ab\nb a\nab"),
              ElementsAre("a", "b", "\nb a\na", "b"));
  EXPECT_THAT(split("^b", "ab\nb a\nab"),
              ElementsAre("ab\n", "b", " a\nab"));
  EXPECT_THAT(split("$", "ab\nb a\nab"), ElementsAre("ab", "\nb a", "\nab"));
}

// Empty matches split between characters, as Oniguruma's find_iter gives
// them to HF; none follows a match right where it ended.
TEST(RegexSplitterTest, EmptyMatchesSplitBetweenCharacters) {
  EXPECT_THAT(split("x*", "ab\nb"), ElementsAre("a", "b", "\n", "b"));
  EXPECT_THAT(split("", "abc"), ElementsAre("a", "b", "c"));
  absl::StatusOr<RegexSplitter> star = RegexSplitter::create("a*");
  ASSERT_TRUE(star.ok());
  using Range = std::pair<size_t, size_t>;
  EXPECT_THAT(star->matches("baab"),
              ElementsAre(Range{0, 0}, Range{1, 3}, Range{4, 4}));
  EXPECT_THAT(star->matches(""), ElementsAre());
}

// Oniguruma's (?m) is RE2's (?s); Oniguruma has no (?s).
TEST(RegexSplitterTest, OnigurumaInlineFlags) {
  EXPECT_THAT(split("(?m)a.b", "xa\nby"), ElementsAre("x", "a\nb", "y"));
  EXPECT_THAT(split("a.b", "xa\nby"), ElementsAre("xa\nby"));
  absl::StatusOr<RegexSplitter> dotAll = RegexSplitter::create("(?s)a.b");
  ASSERT_FALSE(dotAll.ok());
  EXPECT_THAT(std::string(dotAll.status().message()),
              HasSubstr("inline flag s at offset 2 is not Oniguruma's"));
}

// \d is Unicode's Decimal_Number, as in Oniguruma; the classes whose
// Oniguruma meaning RE2 cannot give are refused.
TEST(RegexSplitterTest, OnigurumaClasses) {
  EXPECT_THAT(split("\\d+", "a\xD9\xA3\xD9\xA4" "b"),
              ElementsAre("a", "\xD9\xA3\xD9\xA4", "b"));
  for (const char *pattern :
       {"\\w+", "a\\b", "[\\W]", "\\h", "[[:alpha:]]+"}) {
    absl::StatusOr<RegexSplitter> splitter = RegexSplitter::create(pattern);
    ASSERT_FALSE(splitter.ok()) << pattern;
    EXPECT_THAT(std::string(splitter.status().message()),
                HasSubstr("is not supported: Oniguruma's"));
  }
}

} // namespace
