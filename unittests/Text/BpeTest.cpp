//===- BpeTest.cpp - merges by rank, byte fallback, unk -------------------===//
#include "moe/Runtime/Text/Bpe.h"

#include "absl/strings/str_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace moe::rt::text;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

absl::flat_hash_map<std::string, int64_t>
vocabOf(const std::vector<std::string> &tokens) {
  absl::flat_hash_map<std::string, int64_t> vocab;
  for (const std::string &token : tokens)
    vocab.emplace(token, static_cast<int64_t>(vocab.size()));
  return vocab;
}

std::vector<int64_t> tokenize(const BpeModel &model, const std::string &word) {
  std::vector<int64_t> ids;
  model.tokenize(word, ids);
  return ids;
}

// ids: a=0 b=1 c=2 ab=3 bc=4 abc=5
const std::vector<std::string> kTokens = {"a", "b", "c", "ab", "bc", "abc"};

TEST(BpeTest, LowestRankMergesFirst) {
  absl::StatusOr<BpeModel> bcFirst =
      BpeModel::create(vocabOf(kTokens), {{"b", "c"}, {"a", "b"}}, {}, "test");
  ASSERT_TRUE(bcFirst.ok()) << bcFirst.status();
  EXPECT_THAT(tokenize(*bcFirst, "abc"), ElementsAre(0, 4));
  absl::StatusOr<BpeModel> abFirst = BpeModel::create(
      vocabOf(kTokens), {{"a", "b"}, {"b", "c"}, {"ab", "c"}}, {}, "test");
  ASSERT_TRUE(abFirst.ok());
  EXPECT_THAT(tokenize(*abFirst, "abc"), ElementsAre(5));
  // Equal ranks: leftmost first.
  EXPECT_THAT(tokenize(*abFirst, "abab"), ElementsAre(3, 3));
}

TEST(BpeTest, IgnoreMergesTakesAWholeWordToken) {
  BpeOptions options;
  options.ignoreMerges = true;
  absl::StatusOr<BpeModel> model =
      BpeModel::create(vocabOf(kTokens), {{"b", "c"}}, options, "test");
  ASSERT_TRUE(model.ok());
  EXPECT_THAT(tokenize(*model, "abc"), ElementsAre(5));
  EXPECT_THAT(tokenize(*model, "cbc"), ElementsAre(2, 4));
}

TEST(BpeTest, ByteFallback) {
  std::vector<std::string> tokens = {"<unk>", "a"};
  for (int b = 0; b < 256; ++b)
    tokens.push_back(absl::StrFormat("<0x%02X>", b));
  BpeOptions options;
  options.byteFallback = true;
  options.unkToken = "<unk>";
  absl::StatusOr<BpeModel> model =
      BpeModel::create(vocabOf(tokens), {}, options, "test");
  ASSERT_TRUE(model.ok());
  EXPECT_THAT(tokenize(*model, "a\u00E9"), ElementsAre(1, 2 + 0xC3, 2 + 0xA9));
}

TEST(BpeTest, UnknownCharactersFuseWhenAsked) {
  BpeOptions options;
  options.unkToken = "<unk>";
  absl::StatusOr<BpeModel> apart =
      BpeModel::create(vocabOf({"<unk>", "a"}), {}, options, "test");
  ASSERT_TRUE(apart.ok());
  EXPECT_THAT(tokenize(*apart, "axya"), ElementsAre(1, 0, 0, 1));
  options.fuseUnk = true;
  absl::StatusOr<BpeModel> fused =
      BpeModel::create(vocabOf({"<unk>", "a"}), {}, options, "test");
  ASSERT_TRUE(fused.ok());
  EXPECT_THAT(tokenize(*fused, "axya"), ElementsAre(1, 0, 1));
}

TEST(BpeTest, MergeOutsideTheVocabularyIsAnError) {
  absl::StatusOr<BpeModel> model =
      BpeModel::create(vocabOf({"a", "b"}), {{"a", "b"}}, {}, "f: model");
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("f: model.merges[0]: token 'ab' is not in the "
                        "vocabulary"));
}

} // namespace
