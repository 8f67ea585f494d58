//===- MegatronDatasetTest.cpp - Megatron indexed datasets ----------------===//
#include "TestDatasets.h"

#include "moe/Runtime/Data/TokenDataset.h"
#include "moe/Runtime/Data/TokenWriter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace moe::rt::data;
using moe::testing::appendLE;
using moe::testing::IdxBuilder;
using moe::testing::readBytes;
using moe::testing::ScratchDir;
using moe::testing::u16Bytes;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

std::vector<int64_t> streamOf(const TokenDataset &dataset) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < dataset.numTokens(); ++i)
    out.push_back(dataset.token(i));
  return out;
}

class MegatronDataset : public ::testing::Test {
protected:
  /// Writes prefix.bin and prefix.idx and opens them.
  absl::StatusOr<TokenDataset> openWith(const std::string &bin,
                                        const IdxBuilder &idx) {
    writeBytes(prefix() + ".bin", bin);
    writeBytes(prefix() + ".idx", idx.bytes());
    return TokenDataset::open(prefix());
  }

  /// Expects opening to fail with a message containing each part.
  void expectRejected(const std::string &bin, const IdxBuilder &idx,
                      std::initializer_list<std::string> parts) {
    absl::StatusOr<TokenDataset> dataset = openWith(bin, idx);
    ASSERT_FALSE(dataset.ok()) << "accepted a corrupt dataset";
    std::string message(dataset.status().message());
    if (std::getenv("MOE_TEST_PRINT_ERRORS"))
      std::cerr << message << "\n";
    for (const std::string &part : parts)
      EXPECT_THAT(message, HasSubstr(part));
  }

  std::string prefix() const { return dir_.file("corpus"); }
  std::string idxPath() const { return prefix() + ".idx"; }

  /// Three documents [1 2 3] [] [4 5] as uint16, written contiguously.
  static IdxBuilder threeDocuments() {
    IdxBuilder idx;
    idx.lengths = {3, 0, 2};
    idx.pointers = {0, 6, 6};
    idx.documents = {0, 1, 2, 3};
    return idx;
  }
  static std::string threeDocumentsBin() { return u16Bytes({1, 2, 3, 4, 5}); }

  ScratchDir dir_;
};

TEST_F(MegatronDataset, WriterMatchesTheFormatByteForByte) {
  ASSERT_TRUE(writeMegatronDataset(prefix(), {{1, 2, 3}, {}, {4, 5}}).ok());
  EXPECT_EQ(readBytes(prefix() + ".bin"), threeDocumentsBin());
  EXPECT_EQ(readBytes(idxPath()), threeDocuments().bytes());
  // The header, spelled out.
  std::string idx = readBytes(idxPath());
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(idx[9], 1);  // version, low byte
  EXPECT_EQ(idx[17], 8); // uint16
  EXPECT_EQ(idx[18], 3); // sequence count
  EXPECT_EQ(idx[26], 4); // document count (with the leading 0)
}

TEST_F(MegatronDataset, RoundTripsThroughTheWriter) {
  std::vector<std::vector<int64_t>> documents = {{1, 2, 3}, {}, {4, 5}};
  for (TokenDtype dtype :
       {TokenDtype::UInt8, TokenDtype::Int8, TokenDtype::Int16,
        TokenDtype::UInt16, TokenDtype::Int32, TokenDtype::Int64}) {
    ASSERT_TRUE(writeMegatronDataset(prefix() + ".bin", documents, dtype).ok());
    absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix());
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_EQ(dataset->format(), DatasetFormat::Megatron);
    EXPECT_EQ(dataset->dtype(), dtype) << tokenDtypeName(dtype);
    EXPECT_EQ(dataset->numTokens(), 5);
    EXPECT_EQ(dataset->numSequences(), 3);
    EXPECT_EQ(dataset->numDocuments(), 3);
    EXPECT_EQ(dataset->documentStart(0), 0);
    EXPECT_EQ(dataset->documentStart(1), 3);
    EXPECT_EQ(dataset->documentStart(2), 3);
    EXPECT_EQ(dataset->documentStart(3), 5);
    EXPECT_EQ(streamOf(*dataset), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  }
}

TEST_F(MegatronDataset, ReadsAHandBuiltIndex) {
  absl::StatusOr<TokenDataset> dataset =
      openWith(threeDocumentsBin(), threeDocuments());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(streamOf(*dataset), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(dataset->numDocuments(), 3);
}

TEST_F(MegatronDataset, ConcatenatesSequencesInIndexOrder) {
  // The .bin holds [10 11 12 | 20 21 | 30], the index lists them out of
  // order and skips nothing: the stream follows the index.
  IdxBuilder idx;
  idx.dtypeCode = 4; // int32
  idx.lengths = {2, 1, 3};
  idx.pointers = {12, 20, 0};
  idx.documents = {0, 2, 3};
  std::string bin;
  for (int32_t id : {10, 11, 12, 20, 21, 30})
    appendLE<int32_t>(bin, id);
  absl::StatusOr<TokenDataset> dataset = openWith(bin, idx);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->dtype(), TokenDtype::Int32);
  EXPECT_EQ(streamOf(*dataset), (std::vector<int64_t>{20, 21, 30, 10, 11, 12}));
  EXPECT_EQ(dataset->numDocuments(), 2);
  EXPECT_EQ(dataset->documentStart(1), 3);
  // A read across all three pieces.
  std::vector<int32_t> out(5);
  ASSERT_TRUE(dataset->read(1, 5, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{21, 30, 10, 11, 12}));
  auto range = dataset->idRange();
  EXPECT_EQ(range->first, 10);
  EXPECT_EQ(range->second, 30);
}

TEST_F(MegatronDataset, EmptyIndexIsAnEmptyDataset) {
  IdxBuilder idx; // no sequences, documents = {0}
  absl::StatusOr<TokenDataset> dataset = openWith("", idx);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->numTokens(), 0);
  EXPECT_EQ(dataset->numDocuments(), 0);
}

TEST_F(MegatronDataset, RejectsBadHeaders) {
  std::string bin = threeDocumentsBin();
  IdxBuilder idx = threeDocuments();
  std::string truncated = idx.bytes().substr(0, 20);
  writeBytes(prefix() + ".bin", bin);
  writeBytes(idxPath(), truncated);
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix());
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(std::string(dataset.status().message()),
              HasSubstr("megatron index '" + idxPath() +
                        "': file is truncated: 20 bytes"));

  IdxBuilder badMagic = idx;
  badMagic.magic = std::string("MMIDIDY\0\0", 9);
  expectRejected(bin, badMagic, {idxPath(), "bad magic"});
  IdxBuilder badVersion = idx;
  badVersion.version = 2;
  expectRejected(bin, badVersion, {idxPath(), "unsupported version 2"});
  IdxBuilder floatDtype = idx;
  floatDtype.dtypeCode = 7;
  expectRejected(bin, floatDtype, {idxPath(), "dtype code 7 (float32)"});
  IdxBuilder unknownDtype = idx;
  unknownDtype.dtypeCode = 9;
  expectRejected(bin, unknownDtype, {idxPath(), "unknown dtype code 9"});
  IdxBuilder zeroDtype = idx;
  zeroDtype.dtypeCode = 0;
  expectRejected(bin, zeroDtype, {"unknown dtype code 0"});
}

TEST_F(MegatronDataset, RejectsSizesThatDisagreeWithTheHeader) {
  std::string bin = threeDocumentsBin();
  IdxBuilder tooManySequences = threeDocuments();
  tooManySequences.sequenceCount = 4;
  expectRejected(bin, tooManySequences,
                 {idxPath(), "truncated", "document_count 4"});
  IdxBuilder hugeSequences = threeDocuments();
  hugeSequences.sequenceCount = int64_t{1} << 62;
  expectRejected(bin, hugeSequences,
                 {idxPath(), "sequence_count 4611686018427387904"});
  IdxBuilder tooManyDocuments = threeDocuments();
  tooManyDocuments.documentCount = 5;
  expectRejected(bin, tooManyDocuments, {idxPath(), "document_count 5"});
  IdxBuilder trailing = threeDocuments();
  trailing.documentCount = 3;
  expectRejected(bin, trailing, {idxPath(), "8 trailing bytes"});
}

TEST_F(MegatronDataset, RejectsBadDataFiles) {
  expectRejected(
      threeDocumentsBin() + "x", threeDocuments(),
      {"megatron data '" + prefix() + ".bin'",
       "size 11 bytes is not a multiple of the uint16 token size 2"});
  writeBytes(idxPath(), threeDocuments().bytes());
  std::filesystem::remove(prefix() + ".bin");
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix());
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(dataset.status().message()),
              HasSubstr(prefix() + ".bin"));
}

TEST_F(MegatronDataset, RejectsBadSequences) {
  std::string bin = threeDocumentsBin(); // 10 bytes
  IdxBuilder negativeLength = threeDocuments();
  negativeLength.lengths[2] = -2;
  expectRejected(bin, negativeLength,
                 {idxPath(), "sequence_lengths[2] = -2 is negative"});
  IdxBuilder negativePointer = threeDocuments();
  negativePointer.pointers[1] = -6;
  expectRejected(bin, negativePointer,
                 {idxPath(), "sequence_pointers[1] = -6 is negative"});
  IdxBuilder misaligned = threeDocuments();
  misaligned.pointers[2] = 5;
  expectRejected(bin, misaligned,
                 {idxPath(), "sequence_pointers[2] = 5 is not a multiple"});
  IdxBuilder pastTheEnd = threeDocuments();
  pastTheEnd.pointers[2] = 8;
  expectRejected(bin, pastTheEnd,
                 {idxPath(), "sequence 2", "ends at byte 12",
                  "past the end of '" + prefix() + ".bin' (10 bytes)"});
  IdxBuilder tooLong = threeDocuments();
  tooLong.lengths[0] = 2147483647;
  expectRejected(bin, tooLong, {idxPath(), "sequence 0", "past the end"});
  IdxBuilder farPointer = threeDocuments();
  farPointer.pointers[0] = int64_t{1} << 62;
  expectRejected(bin, farPointer, {idxPath(), "sequence 0", "past the end"});
}

TEST_F(MegatronDataset, SequencesMustCoverTheBinExactly) {
  // [1 2 3] [] [4 5] are bytes [0, 6) and [6, 10) of the .bin.
  std::string bin = threeDocumentsBin();
  std::string both = "'" + prefix() + ".bin' exactly";
  // The .bin of a larger dataset: bytes past the last sequence.
  expectRejected(bin + u16Bytes({6, 7, 8}), threeDocuments(),
                 {idxPath(), "its sequences do not cover", both,
                  "bytes [10, 16) are in no sequence (the 6 bytes after the "
                  "last; the .bin of another dataset?)"});
  // A gap between two sequences.
  IdxBuilder gap = threeDocuments();
  gap.lengths = {2, 0, 2};
  expectRejected(bin, gap, {idxPath(), both, "bytes [4, 6) are in no sequence"});
  // A gap before the first.
  IdxBuilder late = threeDocuments();
  late.lengths = {2, 0, 2};
  late.pointers = {2, 6, 6};
  expectRejected(bin, late, {both, "bytes [0, 2) are in no sequence"});
  // Two sequences sharing bytes.
  IdxBuilder overlap = threeDocuments();
  overlap.pointers = {0, 6, 4};
  overlap.lengths = {3, 0, 3};
  expectRejected(bin, overlap,
                 {idxPath(), both,
                  "bytes [4, 6) are in both sequence 0 and sequence 2"});
  IdxBuilder twice = threeDocuments();
  twice.lengths = {3, 0, 3};
  twice.pointers = {0, 0, 0};
  expectRejected(bin + u16Bytes({0, 0}), twice,
                 {both, "bytes [0, 6) are in both sequence 0 and sequence 2"});
}

TEST_F(MegatronDataset, SequencesMayCoverTheBinInAnyOrder) {
  // Out of index order, and empty sequences anywhere: still exact.
  IdxBuilder idx;
  idx.lengths = {2, 0, 3, 0};
  idx.pointers = {6, 10, 0, 0};
  idx.documents = {0, 2, 4};
  absl::StatusOr<TokenDataset> dataset = openWith(threeDocumentsBin(), idx);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(streamOf(*dataset), (std::vector<int64_t>{4, 5, 1, 2, 3}));
}

TEST_F(MegatronDataset, CheckVocabNamesTheDocument) {
  ASSERT_TRUE(writeMegatronDataset(prefix(), {{1, 2}, {}, {3, 400, 5}, {6}},
                                   TokenDtype::Int16)
                  .ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  absl::Status status = dataset->checkVocab(256);
  EXPECT_EQ(std::string(status.message()),
            "dataset '" + prefix() + ".bin': token id 400 at position 3 "
            "(document 2) is outside the vocabulary [0, 256)");
  // A batch reading it says the same.
  std::vector<int32_t> out(6);
  EXPECT_EQ(dataset->read(0, 6, out.data(), 256), status);
  EXPECT_TRUE(dataset->checkVocab(401).ok());
}

TEST_F(MegatronDataset, RejectsBadDocumentIndices) {
  std::string bin = threeDocumentsBin();
  IdxBuilder none = threeDocuments();
  none.documents = {};
  expectRejected(bin, none, {idxPath(), "document_count is 0"});
  IdxBuilder badStart = threeDocuments();
  badStart.documents = {1, 2, 3};
  expectRejected(bin, badStart,
                 {idxPath(), "document_indices[0] = 1 (expected 0)"});
  IdxBuilder decreasing = threeDocuments();
  decreasing.documents = {0, 2, 1, 3};
  expectRejected(bin, decreasing,
                 {idxPath(), "document_indices[2] = 1 is smaller than "
                             "document_indices[1] = 2"});
  IdxBuilder beyond = threeDocuments();
  beyond.documents = {0, 1, 4, 3};
  expectRejected(
      bin, beyond,
      {idxPath(), "document_indices[2] = 4 is past sequence_count 3"});
  IdxBuilder shortEnd = threeDocuments();
  shortEnd.documents = {0, 1, 2, 2};
  expectRejected(bin, shortEnd,
                 {idxPath(), "document_indices[3] = 2 does not end at "
                             "sequence_count 3"});
}

TEST_F(MegatronDataset, WriterRejectsUnsupportedInput) {
  absl::Status uint32 =
      writeMegatronDataset(prefix(), {{1}}, TokenDtype::UInt32);
  EXPECT_THAT(std::string(uint32.message()), HasSubstr("no uint32 dtype"));
  absl::Status overflow =
      writeMegatronDataset(prefix(), {{1}, {2, 300}}, TokenDtype::UInt8);
  EXPECT_THAT(std::string(overflow.message()),
              HasSubstr("token id 300 at document 1, position 1 does not fit "
                        "uint8"));
  EXPECT_FALSE(std::filesystem::exists(prefix() + ".idx"));
}

TEST_F(MegatronDataset, NegativeIdsAreCaughtOnRead) {
  ASSERT_TRUE(
      writeMegatronDataset(prefix(), {{1, -5, 2}}, TokenDtype::Int16).ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix());
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ(dataset->token(1), -5);
  absl::Status status = dataset->checkVocab(100);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("token id -5 at position 1"));
}

TEST_F(MegatronDataset, SurvivesRandomCorruption) {
  std::string bin = threeDocumentsBin();
  std::string valid = threeDocuments().bytes();
  writeBytes(prefix() + ".bin", bin);
  uint64_t state = 777;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int trial = 0; trial < 1000; ++trial) {
    std::string bytes = valid;
    int flips = 1 + static_cast<int>(next() % 3);
    for (int f = 0; f < flips; ++f)
      bytes[next() % bytes.size()] = static_cast<char>(next());
    if (next() % 4 == 0)
      bytes.resize(next() % bytes.size());
    writeBytes(idxPath(), bytes);
    absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix());
    if (!dataset.ok())
      continue;
    // Whatever was accepted must be readable end to end.
    std::vector<int32_t> out(static_cast<size_t>(dataset->numTokens()) + 1);
    (void)dataset->read(0, dataset->numTokens(), out.data());
    (void)dataset->idRange();
    for (int64_t d = 0; d <= dataset->numDocuments(); ++d)
      EXPECT_LE(dataset->documentStart(d), dataset->numTokens());
  }
}

} // namespace
