//===- TensorBoardTest.cpp - TFRecord framing of event files --------------===//
#include "moe/Runtime/IO/TensorBoard.h"

#include "TestFiles.h"

#include "gtest/gtest.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace moe::rt::io {
namespace {

// The check values of the CRC-32C definition (RFC 3720, B.4) and its
// standard "123456789" test vector.
TEST(TensorBoardTest, Crc32cMatchesItsStandardCheckValues) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
}

// A record is the payload's length (8 bytes, little endian), its masked
// CRC, the payload and the payload's masked CRC.
TEST(TensorBoardTest, RecordsFrameThePayloadWithMaskedCrcs) {
  std::string record = tfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t lengthCrc, payloadCrc;
  std::memcpy(&lengthCrc, record.data() + 8, 4);
  std::memcpy(&payloadCrc, record.data() + 15, 4);
  EXPECT_EQ(lengthCrc, maskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(payloadCrc, maskedCrc32c("abc"));
  uint32_t crc = crc32c("abc");
  EXPECT_EQ(maskedCrc32c("abc"), ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
}

TEST(TensorBoardTest, AnUnwritableDirectoryIsAnErrorNamingIt) {
  testing::ScratchDir dir;
  std::string file = dir.file("plain-file");
  std::ofstream(file) << "x";
  absl::StatusOr<TensorBoardWriter> writer =
      TensorBoardWriter::open(file + "/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(file + "/tb"), std::string::npos)
      << writer.status().message();
}

TEST(TensorBoardTest, TheFileStartsWithTheVersionEvent) {
  testing::ScratchDir dir;
  absl::StatusOr<TensorBoardWriter> writer =
      TensorBoardWriter::open(dir.file("tb"));
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  MetricsRecord record;
  record.step = 3;
  record.loss = 2.5;
  ASSERT_TRUE(writer->write(record, 1.0).ok());
  ASSERT_TRUE(writer->close().ok());
  std::ifstream in(writer->path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("loss"), std::string::npos);
  EXPECT_EQ(std::filesystem::path(writer->path())
                .filename()
                .string()
                .rfind("events.out.tfevents.", 0),
            0u);
}

} // namespace
} // namespace moe::rt::io
