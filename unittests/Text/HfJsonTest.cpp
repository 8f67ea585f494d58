//===- HfJsonTest.cpp - loading tokenizer.json: pipeline and errors -------===//
#include "moe/Runtime/Text/Tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

using namespace moe::rt::text;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::string writeFile(const std::string &name, const std::string &text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

/// A byte-level BPE over "a", "b", " " (as "Ġ") with merges to "Ġab".
std::string byteLevelJson(const std::string &preTokenizer,
                          const std::string &model = "BPE") {
  return R"({"version": "1.0", "added_tokens": [
      {"id": 5, "content": "<|endoftext|>", "single_word": false,
       "lstrip": false, "rstrip": false, "normalized": false,
       "special": true}],
    "normalizer": null, "pre_tokenizer": )" +
         preTokenizer + R"(,
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": ")" +
         model + R"(", "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3,
      "\u0120ab": 4}, "merges": [["a", "b"], ["\u0120", "ab"]]}})";
}

constexpr const char *kByteLevel =
    R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
        "use_regex": true})";

TEST(HfJsonTest, EncodesAndDecodes) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::load(writeFile("ok.json", byteLevelJson(kByteLevel)));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int64_t>> ids =
      (*tokenizer)->encode("ab ab<|endoftext|>");
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(3, 4, 5));
  EXPECT_EQ((*tokenizer)->eosId(), 5);
  EXPECT_EQ((*tokenizer)->vocabSize(), 6);
  EXPECT_EQ(*(*tokenizer)->decode({3, 4, 5}), "ab ab");
  EXPECT_EQ(*(*tokenizer)->decode({3, 5}, false), "ab<|endoftext|>");
  absl::StatusOr<std::string> outside = (*tokenizer)->decode({3, 6});
  ASSERT_FALSE(outside.ok());
  EXPECT_THAT(std::string(outside.status().message()),
              HasSubstr("token id 6 at position 1 is outside the vocabulary "
                        "[0, 6)"));
}

std::string loadError(const std::string &name, const std::string &json) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::load(writeFile(name, json));
  EXPECT_FALSE(tokenizer.ok());
  return std::string(tokenizer.status().message());
}

TEST(HfJsonTest, UnsupportedTypesAreErrors) {
  EXPECT_THAT(loadError("wp.json", byteLevelJson(kByteLevel, "WordPiece")),
              HasSubstr("wp.json: model.type 'WordPiece' is not supported "
                        "(supported: BPE)"));
  EXPECT_THAT(loadError("ws.json", byteLevelJson(R"({"type": "Whitespace"})")),
              HasSubstr("ws.json: pre_tokenizer.type 'Whitespace' is not "
                        "supported (supported: Sequence, ByteLevel, Split, "
                        "Metaspace)"));
  EXPECT_THAT(
      loadError("split.json",
                byteLevelJson(R"({"type": "Split", "pattern": {"String": " "},
                                  "behavior": "Removed", "invert": false})")),
      HasSubstr("pre_tokenizer.behavior 'Removed' is not supported "
                "(supported: Isolated)"));
  EXPECT_THAT(loadError("field.json",
                        byteLevelJson(R"({"type": "ByteLevel", "x": 1})")),
              HasSubstr("pre_tokenizer.x is not a supported field"));
}

TEST(HfJsonTest, MalformedFilesAreErrors) {
  EXPECT_THAT(loadError("bad.json", "{\"model\": "),
              HasSubstr("bad.json: malformed JSON"));
  EXPECT_THAT(loadError("array.json", "[]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(loadError("nomodel.json", "{}"), HasSubstr("model is missing"));
  EXPECT_THAT(loadError("vocab.json", R"({"model": {"type": "BPE",
                                          "vocab": {"a": "x"}}})"),
              HasSubstr("model.vocab.a must be an integer id"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> missing =
      Tokenizer::load(::testing::TempDir() + "/none.json");
  EXPECT_FALSE(missing.ok());
}

std::string replace(std::string text, const std::string &from,
                    const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

// HF loads a vocabulary id of 2000000000; a dense table would not fit.
TEST(HfJsonTest, LargeIdsAreSparse) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::load(writeFile(
          "huge.json", replace(byteLevelJson(kByteLevel), "\"ab\": 3",
                               "\"ab\": 2000000000")));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(*(*tokenizer)->encode("ab ab"), ElementsAre(2000000000, 4));
  EXPECT_EQ((*tokenizer)->vocabSize(), 2000000001);
  EXPECT_EQ(*(*tokenizer)->decode({2000000000, 4}), "ab ab");
  absl::StatusOr<std::string> gap = (*tokenizer)->decode({3});
  ASSERT_FALSE(gap.ok());
  EXPECT_THAT(std::string(gap.status().message()),
              HasSubstr("token id 3 at position 0 has no token"));
}

// HF ignores an added token's id: the vocabulary's id of its content wins,
// else the next id after the vocabulary's token count.
TEST(HfJsonTest, AddedTokensTakeHfIds) {
  std::string json = replace(
      byteLevelJson(kByteLevel), R"("id": 5, "content": "<|endoftext|>")",
      R"("id": 9, "content": "<|endoftext|>")");
  json = replace(json, R"("special": true})",
                 R"("special": true},
      {"id": 6, "content": "a", "single_word": false, "lstrip": false,
       "rstrip": false, "normalized": false, "special": false})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::load(writeFile("added.json", json));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // "a" is split out of the text as an added token (with its vocab id).
  EXPECT_THAT(*(*tokenizer)->encode("ab<|endoftext|>a"),
              ElementsAre(0, 1, 5, 0));
  EXPECT_THAT((*tokenizer)->warnings(),
              ElementsAre(HasSubstr("added_tokens[0] '<|endoftext|>' has id 9 "
                                    "in the file; HF's tokenizers gives it 5"),
                          HasSubstr("added_tokens[1] 'a' has id 6 in the "
                                    "file; HF's tokenizers gives it 0, its id "
                                    "in model.vocab")));
}

TEST(HfJsonTest, FilesHfRefusesAreRefused) {
  EXPECT_THAT(
      loadError("empty.json",
                byteLevelJson(R"({"type": "Metaspace", "replacement": ""})")),
      HasSubstr("pre_tokenizer.replacement must be one character, not ''"));
  EXPECT_THAT(loadError("version.json",
                        replace(byteLevelJson(kByteLevel), R"("1.0")",
                                R"("2.0")")),
              HasSubstr("version \"2.0\" is not supported"));
  EXPECT_THAT(loadError("merges.json",
                        replace(byteLevelJson(kByteLevel),
                                R"(, "merges": [["a", "b"], ["\u0120", "ab"]])",
                                "")),
              HasSubstr("model.merges is missing"));
  std::string deep = std::string(200, '[') + std::string(200, ']');
  EXPECT_THAT(loadError("deep.json", "{\"model\": " + deep + "}"),
              HasSubstr("deep.json: JSON nested deeper than 128 levels at "
                        "line 1 column 137"));
}

TEST(HfJsonTest, UnicodeNormalizers) {
  std::string json = replace(byteLevelJson(kByteLevel), R"("normalizer": null)",
                             R"("normalizer": {"type": "NFKC"})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::load(writeFile("nfkc.json", json));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // Fullwidth ａｂ is ab under NFKC.
  EXPECT_THAT(*(*tokenizer)->encode("\xEF\xBD\x81\xEF\xBD\x82"),
              ElementsAre(3));
}

} // namespace
