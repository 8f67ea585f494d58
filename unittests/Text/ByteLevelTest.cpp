//===- ByteLevelTest.cpp - GPT-2's bytes-to-unicode map -------------------===//
#include "moe/Runtime/Text/ByteLevel.h"

#include "moe/Runtime/Text/Utf8.h"

#include <gtest/gtest.h>

#include <set>

using namespace moe::rt::text;

namespace {

TEST(ByteLevelTest, KnownCharacters) {
  const std::array<char32_t, 256> &map = bytesToUnicode();
  EXPECT_EQ(map['A'], U'A');
  EXPECT_EQ(map[' '], U'\u0120');  // Ġ
  EXPECT_EQ(map['\n'], U'\u010A'); // Ċ
  EXPECT_EQ(map[0], U'\u0100');
  EXPECT_EQ(map[0x7F], U'\u0121');
  EXPECT_EQ(map[0xAD], U'\u0143');
  EXPECT_EQ(map[0xFF], U'\u00FF');
}

TEST(ByteLevelTest, IsABijectionAndRoundTrips) {
  std::set<char32_t> seen(bytesToUnicode().begin(), bytesToUnicode().end());
  EXPECT_EQ(seen.size(), 256u);
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes += static_cast<char>(b);
  EXPECT_EQ(byteLevelDecode(byteLevelEncode(bytes)), bytes);
  EXPECT_EQ(byteLevelEncode(" hi"), "\u0120hi");
  EXPECT_EQ(byteLevelDecode("<|x|>\u4e00"), std::nullopt);
}

TEST(Utf8Test, LossyReplacesMaximalIllFormedSubsequences) {
  EXPECT_EQ(utf8Lossy("a\xC3"), "a\uFFFD");
  EXPECT_EQ(utf8Lossy("\xE2\x82x"), "\uFFFDx");
  EXPECT_EQ(utf8Lossy("\xFF\xFE"), "\uFFFD\uFFFD");
  EXPECT_EQ(utf8Lossy("\xC3\xA9"), "\u00E9");
}

TEST(Utf8Test, FindsMalformedSequences) {
  Utf8Errors none = findUtf8Errors("caf\xC3\xA9");
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.firstOffset, -1);
  // \xE2\x82 is one maximal ill-formed subsequence, as in utf8Lossy.
  Utf8Errors some = findUtf8Errors("ok \xFF\xFE x \xE2\x82 \xC3");
  EXPECT_EQ(some.count, 4);
  EXPECT_EQ(some.firstOffset, 3);
}

} // namespace
