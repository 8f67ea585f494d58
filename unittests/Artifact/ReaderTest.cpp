//===- ReaderTest.cpp - reading .moebin files -----------------------------===//
//
// The file-level layers of trust: I/O errors, size, identifier, FlatBuffers
// verification and version, plus robustness against damaged files.
//
//===----------------------------------------------------------------------===//

#include "TestProgram.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Artifact/Seal.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include <unistd.h>

namespace moe::rt {
namespace {

using ::testing::HasSubstr;
using testing::ForeignOpTable;
using testing::makeMoeProgram;
using testing::makeTinyProgram;
using testing::serialize;

/// A file under the test's temporary directory, removed when it goes out of
/// scope. The name carries the process id so that concurrent runs of the
/// suite (ctest -j) do not share it.
class TempFile {
public:
  TempFile(const std::string &name, const std::vector<uint8_t> &bytes)
      : path(::testing::TempDir() + "moe-reader-" + std::to_string(::getpid()) +
             "-" + name) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  }
  ~TempFile() { std::remove(path.c_str()); }

  const std::string path;
};

absl::StatusOr<Program> parse(const std::vector<uint8_t> &bytes) {
  return parseArtifact(bytes.data(), bytes.size(), "test.moebin");
}

void expectSamePrograms(const Program &a, const Program &b) {
  EXPECT_EQ(a.versionMajor, b.versionMajor);
  EXPECT_EQ(a.versionMinor, b.versionMinor);
  EXPECT_EQ(a.producer, b.producer);
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.vocab, b.model.vocab);
  EXPECT_EQ(a.model.batch, b.model.batch);
  EXPECT_EQ(a.model.seq, b.model.seq);
  EXPECT_EQ(a.model.totalParams, b.model.totalParams);
  EXPECT_EQ(a.model.configJson, b.model.configJson);
  EXPECT_EQ(a.arenaBytes, b.arenaBytes);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.gradNorm, b.gradNorm);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.seed, b.seed);
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    SCOPED_TRACE(a.buffers[i].name);
    EXPECT_EQ(a.buffers[i].name, b.buffers[i].name);
    EXPECT_EQ(a.buffers[i].kind, b.buffers[i].kind);
    EXPECT_EQ(a.buffers[i].dtype, b.buffers[i].dtype);
    EXPECT_EQ(a.buffers[i].shape, b.buffers[i].shape);
    EXPECT_EQ(a.buffers[i].offset, b.buffers[i].offset);
    EXPECT_EQ(a.buffers[i].init, b.buffers[i].init);
    EXPECT_EQ(a.buffers[i].initStd, b.buffers[i].initStd);
    EXPECT_EQ(a.buffers[i].weightDecay, b.buffers[i].weightDecay);
    EXPECT_EQ(a.buffers[i].split, b.buffers[i].split);
  }
  EXPECT_EQ(a.meshAxes, b.meshAxes);
  EXPECT_EQ(a.meshShape, b.meshShape);
  EXPECT_EQ(a.groups, b.groups);
  EXPECT_EQ(a.batchAxes, b.batchAxes);
  ASSERT_EQ(a.instructions.size(), b.instructions.size());
  for (size_t i = 0; i < a.instructions.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a.instructions[i].opcode, b.instructions[i].opcode);
    EXPECT_EQ(a.instructions[i].operands, b.instructions[i].operands);
    EXPECT_EQ(a.instructions[i].results, b.instructions[i].results);
    EXPECT_EQ(a.instructions[i].intAttrs, b.instructions[i].intAttrs);
    EXPECT_EQ(a.instructions[i].floatAttrs, b.instructions[i].floatAttrs);
    EXPECT_EQ(a.instructions[i].location, b.instructions[i].location);
  }
}

TEST(ReaderTest, RoundTripsTinyProgram) {
  Program original = makeTinyProgram();
  ASSERT_TRUE(verifyProgram(original).ok()) << verifyProgram(original);
  TempFile file("tiny.moebin", serialize(original));
  absl::StatusOr<Program> read = readArtifact(file.path);
  ASSERT_TRUE(read.ok()) << read.status();
  expectSamePrograms(original, *read);
}

TEST(ReaderTest, RoundTripsMoeProgram) {
  Program original = makeMoeProgram();
  ASSERT_TRUE(verifyProgram(original).ok()) << verifyProgram(original);
  absl::StatusOr<Program> read = parse(serialize(original));
  ASSERT_TRUE(read.ok()) << read.status();
  expectSamePrograms(original, *read);
}

TEST(ReaderTest, RoundTripsPartitionedProgram) {
  Program original = testing::makeMeshProgram({2, 2});
  ASSERT_TRUE(verifyProgram(original).ok()) << verifyProgram(original);
  absl::StatusOr<Program> read = parse(serialize(original));
  ASSERT_TRUE(read.ok()) << read.status();
  expectSamePrograms(original, *read);
  EXPECT_EQ(read->numRanks(), 4);
  EXPECT_EQ(read->meshDescription(), "dp=2 x tp=2");
  EXPECT_EQ(read->partsOf({"tp", "dp"}), 4);
  EXPECT_EQ(read->partsOf({}), 1);
}

TEST(ReaderTest, ProgramWithoutMeshFieldsIsASingleRankProgram) {
  // serialize() leaves the mesh fields out for a program without one (as a
  // 1.0 writer did), and the reader must accept the file.
  Program original = makeTinyProgram();
  absl::StatusOr<Program> read = parse(serialize(original));
  ASSERT_TRUE(read.ok()) << read.status();
  expectSamePrograms(original, *read);
  EXPECT_EQ(read->numRanks(), 1);
  EXPECT_EQ(read->meshDescription(), "1 rank");
  EXPECT_TRUE(read->groups.empty());
  for (const Buffer &buffer : read->buffers)
    EXPECT_TRUE(buffer.split.empty()) << buffer.name;
}

TEST(ReaderTest, AcceptsMisalignedInput) {
  std::vector<uint8_t> bytes = serialize(makeTinyProgram());
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  absl::StatusOr<Program> read =
      parseArtifact(shifted.data() + 1, bytes.size(), "shifted");
  EXPECT_TRUE(read.ok()) << read.status();
}

TEST(ReaderTest, MissingFile) {
  std::string path = ::testing::TempDir() + "does-not-exist.moebin";
  absl::StatusOr<Program> read = readArtifact(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("cannot open artifact"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
}

TEST(ReaderTest, DirectoryIsNotReadable) {
  absl::StatusOr<Program> read = readArtifact(::testing::TempDir());
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr(::testing::TempDir()));
}

TEST(ReaderTest, EmptyFile) {
  TempFile file("empty.moebin", {});
  absl::StatusOr<Program> read = readArtifact(file.path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("is empty"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(file.path));
}

TEST(ReaderTest, TooSmall) {
  absl::StatusOr<Program> read = parse({1, 2, 3});
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("too small (3 bytes)"));
}

TEST(ReaderTest, EveryTruncationIsAnError) {
  std::vector<uint8_t> bytes = serialize(makeTinyProgram());
  for (size_t length = 0; length < bytes.size(); ++length) {
    // A fresh copy of exactly `length` bytes, so that tools like ASan see
    // any read past the end.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + length);
    absl::StatusOr<Program> read =
        parseArtifact(prefix.data(), prefix.size(), "truncated");
    EXPECT_FALSE(read.ok()) << "prefix of " << length << " bytes verified";
    if (length >= 8 && !read.ok()) {
      EXPECT_THAT(std::string(read.status().message()), HasSubstr("truncated"))
          << length;
    }
  }
}

TEST(ReaderTest, WrongIdentifier) {
  std::vector<uint8_t> bytes = serialize(makeTinyProgram());
  std::copy_n("GGUF", 4, bytes.begin() + 4);
  absl::StatusOr<Program> read = parse(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("'test.moebin' is not a moe artifact"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("'GGUF'"));
}

TEST(ReaderTest, CorruptRootOffset) {
  std::vector<uint8_t> bytes = serialize(makeTinyProgram());
  bytes[0] = 0xff;
  bytes[1] = 0xff;
  absl::StatusOr<Program> read = parse(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("corrupt artifact 'test.moebin'"));
}

TEST(ReaderTest, WrongMajorVersion) {
  Program program = makeTinyProgram();
  program.versionMajor = kArtifactVersionMajor + 1;
  program.versionMinor = 0;
  absl::StatusOr<Program> read = parse(serialize(program));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(
      std::string(read.status().message()),
      HasSubstr(absl::StrCat("has version ", kArtifactVersionMajor + 1, ".0")));
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr(absl::StrCat("supports version ", kArtifactVersionMajor,
                                     ".", kOldestArtifactVersionMinor, " to ",
                                     kArtifactVersionMajor, ".",
                                     kArtifactVersionMinor)));
}

TEST(ReaderTest, VersionIsCheckedBeforeTheRestOfTheFile) {
  // A future major version may lay the file out differently; it must be
  // reported as a version mismatch, not as a corrupt file.
  Program program = makeTinyProgram();
  program.versionMajor = kArtifactVersionMajor + 1;
  std::vector<uint8_t> bytes = serialize(program);
  bytes.resize(bytes.size() - 64);
  absl::StatusOr<Program> read = parse(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("has version"));
}

TEST(ReaderTest, NewerMinorVersion) {
  Program program = makeTinyProgram();
  program.versionMinor = kArtifactVersionMinor + 1;
  absl::StatusOr<Program> read = parse(serialize(program));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr(absl::StrCat("has version ", kArtifactVersionMajor, ".",
                                     kArtifactVersionMinor + 1)));
}

TEST(ReaderTest, SemanticErrorsNameTheFile) {
  Program program = makeTinyProgram();
  program.instructions[0].operands[1] = 999;
  absl::StatusOr<Program> read = parse(serialize(program));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("artifact 'test.moebin': instruction 0 (Embedding): "
                        "operand 1: buffer index 999 is out of range"));
}

/// Every damaged byte is refused, by the checksum trailer, with a message
/// that says the file is damaged: the flips below hit names, shapes, indices
/// and attributes alike, and none of them may load as another program.
TEST(ReaderTest, EveryByteFlipIsRefused) {
  std::vector<uint8_t> bytes = serialize(makeMoeProgram());
  for (uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> damaged = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i)
      damaged[rng() % damaged.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    absl::StatusOr<Program> read = parse(damaged);
    ASSERT_FALSE(read.ok()) << "seed " << seed << " loaded";
    EXPECT_THAT(std::string(read.status().message()),
                ::testing::AnyOf(HasSubstr("damaged"), HasSubstr("not a moe")))
        << read.status();
  }
}

TEST(ReaderTest, ChecksumMismatchNamesTheFile) {
  std::vector<uint8_t> bytes = serialize(makeTinyProgram());
  bytes[bytes.size() / 2] ^= 1;
  absl::StatusOr<Program> read = parse(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("corrupt artifact 'test.moebin': its content does not "
                        "match its checksum"));
}

TEST(ReaderTest, MissingTrailerIsTruncation) {
  std::vector<uint8_t> bytes = serialize(makeTinyProgram());
  bytes.resize(bytes.size() - artifact::kSealSize);
  absl::StatusOr<Program> read = parse(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("does not end in the checksum trailer (truncated or "
                        "damaged file)"));
}

TEST(ReaderTest, UnsealedOlderMajorVersionSaysRecompile) {
  // A 1.x file has no trailer: it is reported as the old version it is.
  Program program = makeTinyProgram();
  program.versionMajor = 1;
  program.versionMinor = 4;
  std::vector<uint8_t> bytes = serialize(program);
  bytes.resize(bytes.size() - artifact::kSealSize);
  absl::StatusOr<Program> read = parse(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(read.status().message()),
      HasSubstr("has version 1.4, this runtime supports version 3.1 to 3.10"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("recompile"));
}

TEST(ReaderTest, SealedVersion2SaysRecompile) {
  // 2.x files carry untyped 4-byte buffers, the FP8 recipe as floats and no
  // op table: refused before anything in them is read as 3.0.
  Program program = makeTinyProgram();
  program.versionMajor = 2;
  program.versionMinor = 0;
  absl::StatusOr<Program> read = parse(serialize(program));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(read.status().message(),
            "artifact 'test.moebin' has version 2.0, this runtime supports "
            "version 3.1 to 3.10 (recompile with this moec)");
}

// An artifact from a moec whose op table numbers opcodes differently is
// refused, naming the opcode: swapping two opcodes of the same signature
// would otherwise pass every check and run the wrong kernels.
TEST(ReaderTest, SwappedOpcodesAreRefused) {
  absl::StatusOr<Program> read = parse(serialize(
      makeTinyProgram(),
      {std::make_pair(Opcode::LinearGradInput, Opcode::LinearGradWeight)}));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(read.status().message(),
            "artifact 'test.moebin': opcode 5 is 'LinearGradWeight' in the op "
            "table it was written with, but 'LinearGradInput' in this "
            "runtime's (recompile with this moec)");
  read = parse(serialize(makeMoeProgram(),
                         {std::make_pair(Opcode::Rope, Opcode::RopeGrad)}));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("opcode 7 is 'RopeGrad' in the op table it was "
                        "written with, but 'Rope' in this runtime's"));
}

TEST(ReaderTest, OpcodeWithAnotherLayoutIsRefused) {
  ForeignOpTable foreign;
  foreign.relaidOut = Opcode::Attention;
  absl::StatusOr<Program> read = parse(serialize(makeMoeProgram(), foreign));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("artifact 'test.moebin': opcode 9 (Attention) has "
                        "another operand or attribute layout in the op table "
                        "it was written with (fingerprint "));
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("(recompile with this moec)"));
}

TEST(ReaderTest, OpTableRecordCoversTheOpcodesUsed) {
  ForeignOpTable foreign;
  foreign.unrecorded = Opcode::Attention;
  absl::StatusOr<Program> read = parse(serialize(makeMoeProgram(), foreign));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()),
              ::testing::MatchesRegex(
                  "artifact 'test.moebin': instruction [0-9]+ uses opcode 9 "
                  "\\(Attention\\), which the file's op table does not "
                  "record \\(recompile with this moec\\)"));
  foreign = {};
  foreign.extraNumber = 200;
  read = parse(serialize(makeTinyProgram(), foreign));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "artifact 'test.moebin': it uses opcode 200 ('FutureOp'), which "
            "this runtime's op table does not have (recompile with this "
            "moec)");
}

/// Edits sealed again (a writer with a bug, or a hand edit with the
/// checksum recomputed) reach the verifier: they must be refused or load as
/// a program that verifies, never crash or read out of bounds.
TEST(ReaderTest, ResealedByteFlipsNeverCrash) {
  std::vector<uint8_t> bytes = serialize(makeMoeProgram());
  int rejected = 0, accepted = 0;
  for (uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> damaged = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    size_t content = damaged.size() - artifact::kSealSize;
    for (int i = 0; i < flips; ++i)
      damaged[rng() % content] ^= static_cast<uint8_t>(1 + rng() % 255);
    testing::reseal(damaged);
    absl::StatusOr<Program> read = parse(damaged);
    if (read.ok()) {
      ++accepted;
      EXPECT_TRUE(verifyProgram(*read).ok());
    } else {
      ++rejected;
      EXPECT_FALSE(read.status().message().empty());
    }
  }
  EXPECT_GT(rejected, 0);
  std::printf("resealed byte flips: %d rejected, %d accepted\n", rejected,
              accepted);
}

} // namespace
} // namespace moe::rt
