//===- FlatDatasetTest.cpp - flat token files and format detection --------===//
#include "TestDatasets.h"

#include "moe/Runtime/Data/TokenDataset.h"
#include "moe/Runtime/Data/TokenWriter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace moe::rt::data;
using moe::testing::appendLE;
using moe::testing::readBytes;
using moe::testing::ScratchDir;
using moe::testing::u16Bytes;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

std::string messageOf(const absl::Status &status) {
  return std::string(status.message());
}

TEST(FlatDataset, RoundTripsUint16) {
  ScratchDir dir;
  std::string path = dir.file("train.bin");
  std::vector<int64_t> tokens = {0, 1, 255, 256, 65535, 7, 7};
  ASSERT_TRUE(writeFlatTokens(path, tokens).ok());
  // Byte for byte: little-endian uint16.
  EXPECT_EQ(readBytes(path), u16Bytes({0, 1, 255, 256, 65535, 7, 7}));

  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->format(), DatasetFormat::Flat);
  EXPECT_EQ(dataset->dtype(), TokenDtype::UInt16);
  EXPECT_EQ(dataset->path(), path);
  EXPECT_TRUE(dataset->indexPath().empty());
  EXPECT_EQ(dataset->numTokens(), 7);
  EXPECT_EQ(dataset->numDocuments(), 1);
  EXPECT_EQ(dataset->documentStart(0), 0);
  EXPECT_EQ(dataset->documentStart(1), 7);
  for (size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(dataset->token(static_cast<int64_t>(i)), tokens[i]);
  std::vector<int32_t> out(4);
  ASSERT_TRUE(dataset->read(2, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{255, 256, 65535, 7}));
  auto range = dataset->idRange();
  ASSERT_TRUE(range.has_value());
  EXPECT_EQ(range->first, 0);
  EXPECT_EQ(range->second, 65535);
}

TEST(FlatDataset, RoundTripsUint32) {
  ScratchDir dir;
  std::string path = dir.file("train.bin");
  std::vector<int64_t> tokens = {70000, 0, 2147483647, 3000000000LL};
  ASSERT_TRUE(writeFlatTokens(path, tokens, TokenDtype::UInt32).ok());
  std::string expected;
  for (int64_t id : tokens)
    appendLE<uint32_t>(expected, static_cast<uint32_t>(id));
  EXPECT_EQ(readBytes(path), expected);

  DatasetOptions options;
  options.flatDtype = TokenDtype::UInt32;
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->dtype(), TokenDtype::UInt32);
  EXPECT_EQ(dataset->numTokens(), 4);
  EXPECT_EQ(dataset->token(3), 3000000000LL);
  std::vector<int32_t> out(3);
  ASSERT_TRUE(dataset->read(0, 3, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{70000, 0, 2147483647}));
  // 3e9 does not fit an int32 token id: reported at its position.
  std::vector<int32_t> all(4);
  absl::Status status = dataset->read(0, 4, all.data());
  EXPECT_THAT(messageOf(status),
              HasSubstr("token id 3000000000 at position 3"));
}

TEST(FlatDataset, OtherDtypes) {
  ScratchDir dir;
  std::string path = dir.file("ids.i32");
  ASSERT_TRUE(writeFlatTokens(path, {5, -2, 9}, TokenDtype::Int32).ok());
  DatasetOptions options;
  options.flatDtype = TokenDtype::Int32;
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->token(1), -2);
  EXPECT_EQ(dataset->idRange()->first, -2);
  std::vector<int32_t> out(3);
  EXPECT_THAT(messageOf(dataset->read(0, 3, out.data())),
              HasSubstr("token id -2 at position 1"));
}

TEST(FlatDataset, ChecksVocabAtDataPositions) {
  ScratchDir dir;
  std::string path = dir.file("train.bin");
  std::vector<int64_t> tokens(100000, 3);
  tokens[70001] = 256;
  tokens[90000] = 300;
  ASSERT_TRUE(writeFlatTokens(path, tokens).ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_TRUE(dataset.ok());
  absl::Status status = dataset->checkVocab(256);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(messageOf(status), HasSubstr(path));
  EXPECT_THAT(messageOf(status),
              HasSubstr("token id 256 at position 70001 is outside the "
                        "vocabulary [0, 256)"));
  EXPECT_TRUE(dataset->checkVocab(301).ok());
  std::vector<int32_t> out(10);
  EXPECT_TRUE(dataset->read(70002, 10, out.data(), 256).ok());
  EXPECT_FALSE(dataset->read(89995, 10, out.data(), 256).ok());
}

TEST(FlatDataset, CheckVocabReportsTheFirstBadIdWhateverTheThreads) {
  // Large enough for several threads (a share is at least 2^22 tokens),
  // with bad ids in several shares: the first in stream order is named.
  ScratchDir dir;
  std::string path = dir.file("large.bin");
  int64_t count = int64_t{3} << 22;
  std::string bytes;
  bytes.reserve(2 * count);
  for (int64_t i = 0; i < count; ++i)
    appendLE<uint16_t>(bytes, i == (int64_t{5} << 21) + 11 ? 900
                              : i == count - 1             ? 1000
                                                           : 7);
  writeBytes(path, bytes);
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ(messageOf(dataset->checkVocab(256)),
            "dataset '" + path + "': token id 900 at position 10485771 is "
            "outside the vocabulary [0, 256)");
  EXPECT_THAT(messageOf(dataset->checkVocab(901)),
              HasSubstr("token id 1000 at position 12582911"));
  EXPECT_TRUE(dataset->checkVocab(1001).ok());
}

TEST(FlatDataset, CheckVocabKnowsEachDtypesRange) {
  ScratchDir dir;
  std::string path = dir.file("ids.bin");
  struct Case {
    TokenDtype dtype;
    std::vector<int64_t> ids;
    int64_t vocab;
    std::string expected; // empty: accepted
  };
  const Case cases[] = {
      // Every uint8 id fits a vocabulary of 256, none of 255 takes 255.
      {TokenDtype::UInt8, {0, 255}, 256, ""},
      {TokenDtype::UInt8, {0, 255}, 255, "token id 255 at position 1"},
      // Negative ids are outside every vocabulary.
      {TokenDtype::Int8, {5, -1}, 1000, "token id -1 at position 1"},
      {TokenDtype::Int16, {-32768}, 70000, "token id -32768 at position 0"},
      {TokenDtype::Int32, {3, 2147483647}, 0, ""},
      {TokenDtype::Int64, {1, -5}, 0, "token id -5 at position 1"},
      {TokenDtype::Int64, {1, int64_t{1} << 40}, 0,
       "token id 1099511627776 at position 1 is outside [0, 2^31)"},
      {TokenDtype::UInt16, {65535}, 65536, ""},
      {TokenDtype::UInt32, {4294967295}, 0,
       "token id 4294967295 at position 0 is outside [0, 2^31)"},
  };
  for (const Case &c : cases) {
    ASSERT_TRUE(writeFlatTokens(path, c.ids, c.dtype).ok());
    DatasetOptions options;
    options.flatDtype = c.dtype;
    absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path, options);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    absl::Status status = dataset->checkVocab(c.vocab);
    if (c.expected.empty())
      EXPECT_TRUE(status.ok()) << tokenDtypeName(c.dtype) << ": " << status;
    else
      EXPECT_THAT(messageOf(status), HasSubstr(c.expected))
          << tokenDtypeName(c.dtype);
  }
}

TEST(FlatDataset, RejectsOutOfRangeReads) {
  ScratchDir dir;
  std::string path = dir.file("train.bin");
  ASSERT_TRUE(writeFlatTokens(path, {1, 2, 3}).ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_TRUE(dataset.ok());
  std::vector<int32_t> out(4);
  EXPECT_FALSE(dataset->read(1, 3, out.data()).ok());
  EXPECT_FALSE(dataset->read(-1, 1, out.data()).ok());
  EXPECT_TRUE(dataset->read(3, 0, out.data()).ok());
}

TEST(FlatDataset, EmptyFileHasNoTokens) {
  ScratchDir dir;
  std::string path = dir.file("empty.bin");
  writeBytes(path, "");
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->numTokens(), 0);
  EXPECT_EQ(dataset->numDocuments(), 0);
  EXPECT_FALSE(dataset->idRange().has_value());
  EXPECT_TRUE(dataset->checkVocab(10).ok());
}

TEST(FlatDataset, RejectsAPartialToken) {
  ScratchDir dir;
  std::string path = dir.file("odd.bin");
  writeBytes(path, std::string(7, 'x'));
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(messageOf(dataset.status()), HasSubstr(path));
  EXPECT_THAT(messageOf(dataset.status()),
              HasSubstr("size 7 bytes is not a multiple of the uint16 token "
                        "size 2"));
  writeBytes(path, std::string(6, 'x'));
  DatasetOptions options;
  options.flatDtype = TokenDtype::UInt32;
  EXPECT_FALSE(TokenDataset::open(path, options).ok());
}

TEST(FlatDataset, ReportsMissingFilesAndDirectories) {
  ScratchDir dir;
  std::string path = dir.file("missing.bin");
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(messageOf(dataset.status()), HasSubstr(path));
  absl::StatusOr<TokenDataset> directory = TokenDataset::open(dir.file(""));
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(messageOf(directory.status()), HasSubstr("not a regular file"));
}

TEST(FlatDataset, WriterRejectsIdsThatDoNotFit) {
  ScratchDir dir;
  std::string path = dir.file("w.bin");
  absl::Status status = writeFlatTokens(path, {1, 65536, 2});
  EXPECT_THAT(messageOf(status),
              HasSubstr("token id 65536 at position 1 does not fit uint16"));
  EXPECT_FALSE(writeFlatTokens(path, {-1}).ok());
  EXPECT_FALSE(writeFlatTokens(path, {4294967296LL}, TokenDtype::UInt32).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(FormatDetection, FollowsTheIdxFile) {
  ScratchDir dir;
  std::string prefix = dir.file("corpus");
  ASSERT_TRUE(writeMegatronDataset(prefix, {{1, 2}, {3}}).ok());
  for (const std::string &path : {prefix, prefix + ".bin", prefix + ".idx"}) {
    absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
    ASSERT_TRUE(dataset.ok()) << path << ": " << dataset.status();
    EXPECT_EQ(dataset->format(), DatasetFormat::Megatron) << path;
    EXPECT_EQ(dataset->numTokens(), 3);
    EXPECT_EQ(dataset->path(), prefix + ".bin");
    EXPECT_EQ(dataset->indexPath(), prefix + ".idx");
  }
  // Forced flat: the .bin read as a plain uint16 stream.
  DatasetOptions flat;
  flat.format = DatasetFormat::Flat;
  absl::StatusOr<TokenDataset> asFlat =
      TokenDataset::open(prefix + ".bin", flat);
  ASSERT_TRUE(asFlat.ok());
  EXPECT_EQ(asFlat->format(), DatasetFormat::Flat);
  EXPECT_EQ(asFlat->numTokens(), 3);
  // No .idx: flat.
  ASSERT_TRUE(writeFlatTokens(dir.file("plain.bin"), {4, 5}).ok());
  absl::StatusOr<TokenDataset> plain =
      TokenDataset::open(dir.file("plain.bin"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->format(), DatasetFormat::Flat);
  // Forced Megatron without an index names the missing index.
  DatasetOptions megatron;
  megatron.format = DatasetFormat::Megatron;
  absl::StatusOr<TokenDataset> missing =
      TokenDataset::open(dir.file("plain.bin"), megatron);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(messageOf(missing.status()), HasSubstr(dir.file("plain.idx")));
}

TEST(FormatDetection, Names) {
  EXPECT_EQ(parseTokenDtype("uint16"), TokenDtype::UInt16);
  EXPECT_EQ(parseTokenDtype("uint32"), TokenDtype::UInt32);
  EXPECT_FALSE(parseTokenDtype("float32").has_value());
  EXPECT_EQ(parseDatasetFormat("megatron"), DatasetFormat::Megatron);
  EXPECT_FALSE(parseDatasetFormat("json").has_value());
  EXPECT_EQ(megatronPathsFor("a/b.bin").idx, "a/b.idx");
  EXPECT_EQ(megatronPathsFor("a/b").bin, "a/b.bin");
  for (uint8_t code = 0; code < 12; ++code) {
    std::optional<TokenDtype> dtype = tokenDtypeFromMegatronCode(code);
    if (dtype) {
      EXPECT_EQ(megatronCodeOf(*dtype), code);
    }
  }
  EXPECT_FALSE(megatronCodeOf(TokenDtype::UInt32).has_value());
}

} // namespace
