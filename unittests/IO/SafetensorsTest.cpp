//===- SafetensorsTest.cpp - safetensors round trips and corruption -------===//
#include "TestFiles.h"

#include "moe/Runtime/IO/Safetensors.h"

#include "nlohmann/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <filesystem>

using namespace moe::rt::io;
using moe::testing::appendLE;
using moe::testing::readBytes;
using moe::testing::ScratchDir;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

/// A file from a raw header (not padded) and data section.
std::string craft(const std::string &header, const std::string &data = "") {
  std::string bytes;
  appendLE<uint64_t>(bytes, header.size());
  return bytes + header + data;
}

absl::StatusOr<SafetensorsFile> parse(const std::string &bytes) {
  return parseSafetensors(reinterpret_cast<const uint8_t *>(bytes.data()),
                          bytes.size(), "bad.safetensors");
}

/// Expects `bytes` to be rejected with a message naming the file and
/// containing each of `parts`.
void expectRejected(const std::string &bytes,
                    std::initializer_list<std::string> parts) {
  absl::StatusOr<SafetensorsFile> file = parse(bytes);
  ASSERT_FALSE(file.ok()) << "accepted a corrupt file";
  std::string message(file.status().message());
  if (std::getenv("MOE_TEST_PRINT_ERRORS"))
    std::cerr << message << "\n";
  EXPECT_THAT(message, HasSubstr("'bad.safetensors'"));
  for (const std::string &part : parts)
    EXPECT_THAT(message, HasSubstr(part));
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

TEST(Safetensors, RoundTripsF32AndI32WithMetadata) {
  ScratchDir dir;
  std::string path = dir.file("model.safetensors");
  std::vector<float> weight = {1.5f, -2.25f, 3.0f, 0.0f, 1e-30f, -7.0f};
  std::vector<int32_t> ids = {7, -1, 2147483647};
  float scalar = 42.0f;
  std::vector<TensorView> tensors = {
      {"layers.0.weight", "F32", {2, 3}, weight.data()},
      {"ids", "I32", {3}, ids.data()},
      {"scale", "F32", {}, &scalar},
      {"empty", "F32", {0, 4}, nullptr}};
  ASSERT_TRUE(
      writeSafetensors(path, tensors, {{"format", "pt"}, {"step", "12"}}).ok());

  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 4u);
  EXPECT_EQ(file->metadata.at("format"), "pt");
  EXPECT_EQ(file->metadata.at("step"), "12");

  const TensorData *w = file->find("layers.0.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->f32, weight);
  EXPECT_TRUE(w->i32.empty());
  const TensorData *i = file->find("ids");
  ASSERT_NE(i, nullptr);
  EXPECT_TRUE(i->isInteger());
  EXPECT_EQ(i->i32, ids);
  const TensorData *s = file->find("scale");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numElements(), 1);
  EXPECT_EQ(s->f32, std::vector<float>{42.0f});
  const TensorData *e = file->find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->numElements(), 0);
  EXPECT_EQ(file->find("missing"), nullptr);
  // Tensors come back in data order, which is the order written.
  EXPECT_EQ(file->tensors[0].name, "layers.0.weight");
  EXPECT_EQ(file->tensors[1].name, "ids");
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  std::vector<float> a = {1.0f, 2.0f};
  std::vector<int32_t> b = {3};
  absl::StatusOr<std::string> bytes = encodeSafetensors(
      {{"a", "F32", {2}, a.data()}, {"b", "I32", {1}, b.data()}}, {{"k", "v"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<uint8_t>((*bytes)[i])) << (8 * i);
  // The header is padded with spaces so that the data starts 8-aligned.
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes->size(), 8 + n + 12);
  std::string header = bytes->substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"]["k"], "v");
  EXPECT_EQ(json["a"]["dtype"], "F32");
  EXPECT_EQ(json["a"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(json["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(json["b"]["data_offsets"], nlohmann::json::array({8, 12}));
  float first;
  std::memcpy(&first, bytes->data() + 8 + n, 4);
  EXPECT_EQ(first, 1.0f);
  // No metadata: no "__metadata__" key at all.
  absl::StatusOr<std::string> plain =
      encodeSafetensors({{"a", "F32", {2}, a.data()}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->find("__metadata__"), std::string::npos);
}

TEST(Safetensors, WriteIsAtomicAndReplaces) {
  ScratchDir dir;
  std::string path = dir.file("ckpt.safetensors");
  writeBytes(path, "old contents");
  std::vector<float> x = {1, 2, 3};
  ASSERT_TRUE(writeSafetensors(path, {{"x", "F32", {3}, x.data()}}).ok());
  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors[0].f32, x);
  // Nothing but the target is left in the directory.
  int entries = 0;
  for (const auto &entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  // A failed write leaves the old file and no temporary behind.
  EXPECT_FALSE(writeSafetensors(path, {{"x", "F64", {3}, x.data()}}).ok());
  EXPECT_FALSE(writeSafetensors(dir.file("no/such/dir/x.safetensors"),
                                {{"x", "F32", {3}, x.data()}})
                   .ok());
  EXPECT_TRUE(readSafetensors(path).ok());
}

TEST(Safetensors, DecodesBf16AndF16ToF32) {
  std::string data;
  // BF16: 1.0, -2.5, 3.140625, the smallest normal bf16.
  for (uint16_t bits : {0x3f80, 0xc020, 0x4049, 0x0080})
    appendLE<uint16_t>(data, bits);
  // F16: 1.0, -2.0, 65504, 2^-24 (subnormal), +inf, -0.
  for (uint16_t bits : {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000})
    appendLE<uint16_t>(data, bits);
  std::string header =
      R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
      R"("h":{"dtype":"F16","shape":[6],"data_offsets":[8,20]}})";
  ScratchDir dir;
  std::string path = dir.file("half.safetensors");
  writeBytes(path, craft(header, data));
  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorData *b = file->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, "BF16");
  EXPECT_EQ(b->f32,
            (std::vector<float>{1.0f, -2.5f, 3.140625f, 1.17549435e-38f}));
  const TensorData *h = file->find("h");
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->f32.size(), 6u);
  EXPECT_EQ(h->f32[0], 1.0f);
  EXPECT_EQ(h->f32[1], -2.0f);
  EXPECT_EQ(h->f32[2], 65504.0f);
  EXPECT_EQ(h->f32[3], 5.9604644775390625e-8f);
  EXPECT_TRUE(std::isinf(h->f32[4]) && h->f32[4] > 0);
  EXPECT_EQ(h->f32[5], 0.0f);
  EXPECT_TRUE(std::signbit(h->f32[5]));
}

TEST(MappedSafetensors, DecodesAnyRunOfATensor) {
  // The same BF16 and F16 bytes as above, and an F32 tensor, decoded a run
  // at a time: what a rank reads of its own block.
  std::string data;
  for (uint16_t bits : {0x3f80, 0xc020, 0x4049, 0x0080})
    appendLE<uint16_t>(data, bits);
  for (uint16_t bits : {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000})
    appendLE<uint16_t>(data, bits);
  for (float value : {0.5f, -1.25f, 7.0f}) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    appendLE<uint32_t>(data, bits);
  }
  std::string header =
      R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
      R"("h":{"dtype":"F16","shape":[6],"data_offsets":[8,20]},)"
      R"("f":{"dtype":"F32","shape":[3],"data_offsets":[20,32]}})";
  ScratchDir dir;
  std::string path = dir.file("runs.safetensors");
  writeBytes(path, craft(header, data));
  absl::StatusOr<MappedSafetensors> file = MappedSafetensors::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  const MappedSafetensors::Tensor *b = file->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b->numElements(), 4);
  float out[3] = {0, 0, 0};
  MappedSafetensors::decode(*b, 1, 2, out);
  EXPECT_EQ(out[0], -2.5f);
  EXPECT_EQ(out[1], 3.140625f);
  MappedSafetensors::decode(*file->find("h"), 2, 2, out);
  EXPECT_EQ(out[0], 65504.0f);
  EXPECT_EQ(out[1], 5.9604644775390625e-8f);
  MappedSafetensors::decode(*file->find("f"), 1, 2, out);
  EXPECT_EQ(out[0], -1.25f);
  EXPECT_EQ(out[1], 7.0f);
  EXPECT_EQ(file->find("missing"), nullptr);
}

TEST(MappedSafetensors, MapsFp8CodesTheDecodingReaderRefuses) {
  // An FP8 checkpoint's codes mean nothing without their scales: the mapped
  // reader hands them to the loader that knows the scales; the reader that
  // decodes whole files (moe-run's own) refuses them.
  const uint8_t codes[] = {0x38, 0xb8, 0x7e};
  absl::StatusOr<std::string> bytes =
      encodeSafetensors({{"w", "F8_E4M3", {3}, codes}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ScratchDir dir;
  std::string path = dir.file("fp8.safetensors");
  writeBytes(path, *bytes);
  absl::StatusOr<MappedSafetensors> file = MappedSafetensors::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const MappedSafetensors::Tensor *w = file->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->isFp8());
  EXPECT_FALSE(w->isFloat());
  EXPECT_EQ(std::memcmp(w->bytes, codes, 3), 0);
  absl::StatusOr<SafetensorsFile> decoded = readSafetensors(path);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("tensor 'w': unsupported dtype 'F8_E4M3' (supported: "
                        "F32, I32, BF16, F16)"));
  // Other FP8 formats stay refused by both.
  writeBytes(path, *encodeSafetensors({{"w", "F8_E5M2", {3}, codes}}));
  file = MappedSafetensors::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("unsupported dtype 'F8_E5M2' (supported: F32, I32, "
                        "BF16, F16, F8_E4M3)"));
}

TEST(MappedSafetensors, VerifiesTheHeaderAsTheReaderDoes) {
  // Offsets past the data section are refused before anything is read.
  ScratchDir dir;
  std::string path = dir.file("bad.safetensors");
  writeBytes(path,
             craft(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                   std::string(8, '\0')));
  absl::StatusOr<MappedSafetensors> file = MappedSafetensors::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("tensor 'x': data_offsets [0, 16] extend past the "
                        "data section (8 bytes)"));
}

TEST(Safetensors, WritesEachDTypeAtItsOwnSize) {
  // A BF16 tensor is written as BF16 (2 bytes an element) and reads back;
  // FP8 and I64 tensors take 1 and 8 bytes an element.
  const uint16_t bf16[] = {0x3f80, 0xc020, 0x4049};
  const uint8_t fp8[] = {0x38, 0xb8};
  const int64_t i64[] = {-1, 7};
  absl::StatusOr<std::string> bytes =
      encodeSafetensors({{"b", "BF16", {3}, bf16},
                         {"e", "F8_E4M3", {2}, fp8},
                         {"l", "I64", {2}, i64}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(*bytes, HasSubstr(R"("b":{"dtype":"BF16","shape":[3],)"
                                R"("data_offsets":[0,6]})"));
  EXPECT_THAT(*bytes, HasSubstr(R"("e":{"dtype":"F8_E4M3","shape":[2],)"
                                R"("data_offsets":[6,8]})"));
  EXPECT_THAT(*bytes, HasSubstr(R"("l":{"dtype":"I64","shape":[2],)"
                                R"("data_offsets":[8,24]})"));
  absl::StatusOr<std::string> half = encodeSafetensors({{"b", "BF16", {3}, bf16}});
  ASSERT_TRUE(half.ok()) << half.status();
  absl::StatusOr<SafetensorsFile> file = parseSafetensors(
      reinterpret_cast<const uint8_t *>(half->data()), half->size(), "<memory>");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors[0].dtype, "BF16");
  EXPECT_EQ(file->tensors[0].f32, (std::vector<float>{1.0f, -2.5f, 3.140625f}));
}

TEST(Safetensors, AcceptsAHeaderInAnyKeyOrder) {
  std::string header =
      R"({"y":{"data_offsets":[4,8],"shape":[1],"dtype":"I32"},)"
      R"("x":{"shape":[1],"dtype":"F32","data_offsets":[0,4]},)"
      R"("__metadata__":{}})";
  absl::StatusOr<SafetensorsFile> file = parse(craft(header, zeros(8)));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors[0].name, "x");
  EXPECT_EQ(file->tensors[1].name, "y");
}

TEST(Safetensors, RejectsFileProblems) {
  expectRejected("", {"too small"});
  expectRejected("\x08\0\0\0", {"too small"});
  std::string tooLong;
  appendLE<uint64_t>(tooLong, 100);
  tooLong += "{}";
  expectRejected(tooLong, {"header length 100", "exceeds"});
  std::string huge;
  appendLE<uint64_t>(huge, ~uint64_t{0});
  expectRejected(huge + "{}", {"exceeds"});
  std::string overLimit;
  appendLE<uint64_t>(overLimit, kSafetensorsMaxHeaderSize + 8);
  overLimit += "{" + std::string(kSafetensorsMaxHeaderSize + 7, ' ');
  expectRejected(overLimit, {"limit"});
  expectRejected(craft(""), {"does not start with '{'"});
  expectRejected(craft("  {}"), {"does not start with '{'"});
  expectRejected(craft("{\"a\": "), {"not valid json"});
  expectRejected(craft("{\"a\":1}trailing"), {"not valid json"});
  expectRejected(craft("{\"a\":1} "), {"tensor 'a'"});
}

TEST(Safetensors, RejectsBadMetadata) {
  expectRejected(craft(R"({"__metadata__":[1]})"), {"'__metadata__'"});
  expectRejected(craft(R"({"__metadata__":{"k":3}})"),
                 {"'__metadata__'", "key 'k'", "not a string"});
}

TEST(Safetensors, RejectsBadTensorEntries) {
  auto entry = [](const std::string &body, const std::string &data = "") {
    return craft("{\"w\":" + body + "}", data);
  };
  expectRejected(entry("[1]"), {"tensor 'w'", "not a json object"});
  expectRejected(entry(R"({"shape":[1],"data_offsets":[0,4]})"),
                 {"tensor 'w'", "missing field 'dtype'"});
  expectRejected(entry(R"({"dtype":5,"shape":[1],"data_offsets":[0,4]})"),
                 {"tensor 'w'", "'dtype' is not a string"});
  expectRejected(
      entry(R"({"dtype":"F31","shape":[1],"data_offsets":[0,4]})", zeros(4)),
      {"tensor 'w'", "unknown dtype 'F31'"});
  expectRejected(
      entry(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})", zeros(8)),
      {"tensor 'w'", "unsupported dtype 'F64'"});
  expectRejected(entry(R"({"dtype":"F32","data_offsets":[0,4]})", zeros(4)),
                 {"tensor 'w'", "missing field 'shape'"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":4,"data_offsets":[0,4]})", zeros(4)),
      {"tensor 'w'", "'shape' is not an array"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", zeros(4)),
      {"tensor 'w'", "shape[0]"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[1,1.5],"data_offsets":[0,4]})",
            zeros(4)),
      {"tensor 'w'", "shape[1]"});
  expectRejected(entry(R"({"dtype":"F32","shape":[4294967296,4294967296,)"
                       R"(4294967296],"data_offsets":[0,4]})",
                       zeros(4)),
                 {"tensor 'w'", "too large"});
  expectRejected(entry(R"({"dtype":"F32","shape":[1]})", zeros(4)),
                 {"tensor 'w'", "missing field 'data_offsets'"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", zeros(4)),
      {"tensor 'w'", "'data_offsets'"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})", zeros(4)),
      {"tensor 'w'", "data_offsets"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", zeros(4)),
      {"tensor 'w'", "data_offsets"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[0],"data_offsets":[4,0]})", zeros(4)),
      {"tensor 'w'", "end before they begin"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", zeros(4)),
      {"tensor 'w'", "[0, 8]", "past the data section (4 bytes)"});
  expectRejected(
      entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", zeros(4)),
      {"tensor 'w'", "hold 4 bytes", "needs 8"});
  expectRejected(
      entry(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,4]})", zeros(4)),
      {"tensor 'w'", "BF16 needs 6"});
}

TEST(Safetensors, RejectsBadLayouts) {
  expectRejected(
      craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            zeros(8)),
      {"tensor 'b'", "overlap tensor 'a'"});
  expectRejected(
      craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            zeros(12)),
      {"tensor 'b'", "gap of 4 bytes"});
  expectRejected(
      craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            zeros(8)),
      {"tensor 'a'", "gap of 4 bytes"});
  expectRejected(
      craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            zeros(6)),
      {"2 bytes after the last tensor"});
  expectRejected(craft("{}", zeros(1)), {"1 bytes after the last tensor"});
}

TEST(Safetensors, ReportsAMissingFileByPath) {
  ScratchDir dir;
  std::string path = dir.file("nope.safetensors");
  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
}

TEST(Safetensors, WriterRejectsBadTensors) {
  float x = 1.0f;
  auto error = [](const absl::Status &status) {
    return std::string(status.message());
  };
  ScratchDir dir;
  std::string path = dir.file("w.safetensors");
  EXPECT_THAT(error(writeSafetensors(
                  path, {{"a", "F32", {1}, &x}, {"a", "F32", {1}, &x}})),
              HasSubstr("tensor 'a': duplicate"));
  EXPECT_THAT(error(writeSafetensors(path, {{"__metadata__", "F32", {1}, &x}})),
              HasSubstr("reserved"));
  EXPECT_THAT(error(writeSafetensors(path, {{"", "F32", {1}, &x}})),
              HasSubstr("empty name"));
  EXPECT_THAT(error(writeSafetensors(path, {{"a", "F64", {1}, &x}})),
              HasSubstr("unsupported dtype 'F64' (the writer writes F32, I32, "
                        "BF16, F16, F8_E4M3, F8_E5M2, I64)"));
  EXPECT_THAT(error(writeSafetensors(path, {{"a", "F32", {-1}, &x}})),
              HasSubstr("negative dimension"));
  EXPECT_THAT(error(writeSafetensors(path, {{"a", "F32", {2}, nullptr}})),
              HasSubstr("data is null"));
  EXPECT_THAT(error(writeSafetensors(path, {{"a\xff", "F32", {1}, &x}})),
              HasSubstr("utf-8"));
  EXPECT_THAT(error(writeSafetensors(path, {{"a", "F32", {1}, &x}})), "");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Safetensors, SurvivesRandomCorruption) {
  std::vector<float> a = {1, 2, 3, 4};
  std::vector<int32_t> b = {5, 6};
  absl::StatusOr<std::string> valid = encodeSafetensors(
      {{"a", "F32", {2, 2}, a.data()}, {"b", "I32", {2}, b.data()}},
      {{"k", "v"}});
  ASSERT_TRUE(valid.ok());
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = *valid;
    int flips = 1 + static_cast<int>(next() % 4);
    for (int f = 0; f < flips; ++f)
      bytes[next() % bytes.size()] = static_cast<char>(next());
    if (next() % 4 == 0)
      bytes.resize(next() % bytes.size());
    // Must return, never crash; accepted files must decode consistently.
    absl::StatusOr<SafetensorsFile> file = parse(bytes);
    if (file.ok()) {
      ++accepted;
      for (const TensorData &tensor : file->tensors)
        EXPECT_EQ(static_cast<int64_t>(tensor.f32.size() + tensor.i32.size()),
                  tensor.numElements());
    }
  }
  EXPECT_LT(accepted, 3000);
}

} // namespace
