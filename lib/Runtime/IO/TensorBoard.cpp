//===- TensorBoard.cpp - TFRecord event files of scalar metrics -----------===//
#include "moe/Runtime/IO/TensorBoard.h"

#include "TensorBoardEvent.pb.h"

#include "absl/strings/str_cat.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace moe::rt::io {

namespace {
// Bitwise CRC-32C, table driven: no Debian package provides it (Abseil's
// crc32c is newer than bookworm's), and event files are small.
constexpr std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ (crc & 1 ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = makeCrcTable();

void appendLittleEndian(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0')
    return "localhost";
  return name;
}
} // namespace

uint32_t crc32c(absl::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data)
    crc = kCrcTable[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t maskedCrc32c(absl::string_view data) {
  uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfRecord(absl::string_view payload) {
  std::string length;
  appendLittleEndian(length, payload.size(), 8);
  std::string record = length;
  appendLittleEndian(record, maskedCrc32c(length), 4);
  record.append(payload.data(), payload.size());
  appendLittleEndian(record, maskedCrc32c(payload), 4);
  return record;
}

void TensorBoardWriter::FileCloser::operator()(std::FILE *file) const {
  std::fclose(file);
}

absl::StatusOr<TensorBoardWriter>
TensorBoardWriter::open(const std::string &dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::UnavailableError(absl::StrCat(
        "cannot create TensorBoard directory '", dir, "': ", error.message()));
  // TensorBoard reads every events.out.tfevents.* file of the directory,
  // ordered by name: seconds first, so a resumed run's file sorts after.
  std::string path = (std::filesystem::path(dir) /
                      absl::StrCat("events.out.tfevents.", std::time(nullptr),
                                   ".", hostName(), ".", getpid()))
                         .string();
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return absl::UnavailableError(
        absl::StrCat("cannot open TensorBoard event file '", path,
                     "': ", std::strerror(errno)));
  TensorBoardWriter writer;
  writer.path_ = path;
  writer.file_.reset(file);
  tensorboard::Event version;
  version.set_wall_time(static_cast<double>(std::time(nullptr)));
  version.set_file_version("brain.Event:2");
  if (absl::Status status = writer.append(version.SerializeAsString());
      !status.ok())
    return status;
  return writer;
}

absl::Status TensorBoardWriter::append(const std::string &event) {
  if (!file_)
    return absl::FailedPreconditionError(
        absl::StrCat("TensorBoard event file '", path_, "' is not open"));
  std::string record = tfRecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) !=
          record.size() ||
      std::fflush(file_.get()) != 0)
    return absl::UnavailableError(
        absl::StrCat("cannot write TensorBoard event file '", path_,
                     "': ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::write(const MetricsRecord &record,
                                      double wallTime) {
  tensorboard::Event event;
  event.set_wall_time(wallTime);
  event.set_step(record.step);
  tensorboard::Summary *summary = event.mutable_summary();
  auto add = [&](const std::string &tag, const std::optional<double> &value) {
    if (!value)
      return;
    tensorboard::Summary::Value *scalar = summary->add_value();
    scalar->set_tag(tag);
    scalar->set_simple_value(static_cast<float>(*value));
  };
  add("loss", record.loss);
  add("grad_norm", record.gradNorm);
  add("lr", record.lr);
  add("tokens_per_s", record.tokensPerS);
  add("flops_per_s", record.flopsPerS);
  for (const auto &[tag, value] : record.extra)
    add(tag, value);
  return append(event.SerializeAsString());
}

absl::Status TensorBoardWriter::close() {
  if (!file_)
    return absl::OkStatus();
  std::FILE *file = file_.release();
  if (std::fclose(file) != 0)
    return absl::UnavailableError(
        absl::StrCat("cannot close TensorBoard event file '", path_,
                     "': ", std::strerror(errno)));
  return absl::OkStatus();
}

} // namespace moe::rt::io
