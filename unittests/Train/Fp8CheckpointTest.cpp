//===- Fp8CheckpointTest.cpp - dequantizing block-quantized FP8 -----------===//
//
// A 3 x 5 weight in blocks of 2 x 2 (so both edges are partial: the last
// block row has one row, the last block column one column), written with
// encodeSafetensors and read back mapped, as moe-run --load reads it.
//
//===----------------------------------------------------------------------===//
#include "Fp8Checkpoint.h"

#include "TestFiles.h"

#include "moe/Runtime/IO/Safetensors.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

using namespace moe::rt;
using moe::testing::ScratchDir;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

// E4M3 codes: 1.0 (0x38), -1.5 (0xbc), 448 (0x7e, the largest), 2^-9
// (0x01, the smallest subnormal), 0.875 * 2^-6 (0x07, the largest
// subnormal), -0 (0x80), 2^-6 (0x08, the smallest normal).
const uint8_t kCodes[15] = {0x38, 0xbc, 0x7e, 0x01, 0x38,  //
                            0x07, 0x80, 0x08, 0x38, 0x38,  //
                            0x38, 0xbc, 0x38, 0x7e, 0x38};
// Block [i, j] scales rows 2i, 2i+1 and columns 2j, 2j+1.
const float kScales[6] = {0.5f, 3.0f, 1.0f / 3.0f, //
                          2.0f, 1.0f, 7.0f};

struct Mapped {
  ScratchDir dir;
  io::MappedSafetensors file;
};

std::unique_ptr<Mapped> write(std::vector<int64_t> scaleShape = {2, 3},
                              const float *scales = kScales) {
  auto mapped = std::make_unique<Mapped>();
  std::string path = mapped->dir.file("model.safetensors");
  absl::StatusOr<std::string> bytes = io::encodeSafetensors(
      {{"w", "F8_E4M3", {3, 5}, kCodes},
       {"w_scale_inv", "F32", scaleShape, scales}});
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  writeBytes(path, *bytes);
  absl::StatusOr<io::MappedSafetensors> file =
      io::MappedSafetensors::open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  mapped->file = std::move(*file);
  return mapped;
}

train::Fp8Weight weightOf(const Mapped &mapped, int64_t block = 2) {
  train::Fp8Weight weight;
  weight.codes = mapped.file.find("w");
  weight.scales = mapped.file.find("w_scale_inv");
  weight.codesFile = weight.scalesFile = "model.safetensors";
  weight.format = {block, block};
  return weight;
}

/// fp32 `x` rounded to BF16, nearest even.
float bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

TEST(Fp8Checkpoint, DequantizesEachCodeWithItsBlocksScaleIntoBf16) {
  std::unique_ptr<Mapped> mapped = write();
  train::Fp8Weight weight = weightOf(*mapped);
  ASSERT_TRUE(weight.check().ok()) << weight.check();
  float out[15];
  ASSERT_TRUE(weight.dequantize(0, 15, out).ok());
  float third = 1.0f / 3.0f;
  const float expected[15] = {
      0.5f,  -0.75f, 448.0f * 3.0f, std::ldexp(3.0f, -9), bf16(third),
      bf16(0.875f * std::ldexp(0.5f, -6)), -0.0f, std::ldexp(3.0f, -6), 3.0f,
      bf16(third),
      2.0f,  -3.0f, 1.0f, 448.0f, 7.0f};
  for (int i = 0; i < 15; ++i)
    EXPECT_EQ(out[i], expected[i]) << "element " << i;
  EXPECT_TRUE(std::signbit(out[6]));
  // 1/3 is not a BF16 value: the product is rounded, as torch's .to(bfloat16).
  EXPECT_NE(out[4], third);
}

TEST(Fp8Checkpoint, DequantizesAnyRunAsTheWholeDoes) {
  // Runs that start and end inside blocks and cross rows: what a rank
  // holding a slice reads.
  std::unique_ptr<Mapped> mapped = write();
  train::Fp8Weight weight = weightOf(*mapped);
  float whole[15];
  ASSERT_TRUE(weight.dequantize(0, 15, whole).ok());
  for (int64_t first = 0; first < 15; ++first)
    for (int64_t count = 1; first + count <= 15; ++count) {
      float run[15];
      ASSERT_TRUE(weight.dequantize(first, count, run).ok());
      for (int64_t i = 0; i < count; ++i)
        EXPECT_EQ(std::memcmp(&run[i], &whole[first + i], 4), 0)
            << "run [" << first << ", " << first + count << ") element " << i;
    }
}

TEST(Fp8Checkpoint, RefusesANonFiniteScaleOfABlockItReads) {
  float scales[6] = {0.5f, 3.0f, 1.0f, 2.0f,
                     std::numeric_limits<float>::quiet_NaN(), 7.0f};
  std::unique_ptr<Mapped> mapped = write({2, 3}, scales);
  train::Fp8Weight weight = weightOf(*mapped);
  float out[15];
  // Row 0 does not touch block [1, 1].
  EXPECT_TRUE(weight.dequantize(0, 5, out).ok());
  absl::Status status = weight.dequantize(10, 5, out);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("model.safetensors: tensor 'w_scale_inv' holds nan at "
                        "element [1, 1]"));
}

TEST(Fp8Checkpoint, RefusesScalesOfAnotherBlockSize) {
  std::unique_ptr<Mapped> mapped = write({1, 1});
  absl::Status status = weightOf(*mapped).check();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor 'w_scale_inv' has shape [1, 1], but 'w' of "
                        "shape [3, 5] in blocks of [2, 2] "
                        "(quantization_config.weight_block_size) needs [2, 3]"));
  // The same scales fit blocks of 128.
  EXPECT_TRUE(weightOf(*mapped, 128).check().ok());
}

TEST(Fp8Checkpoint, ReadsTheBlockSizeOfQuantizationConfig) {
  ScratchDir dir;
  std::string path = dir.file("config.json");
  auto read = [&](const std::string &text) {
    writeBytes(path, text);
    train::CheckpointConfig config(path);
    return train::readFp8BlockFormat(config);
  };
  absl::StatusOr<std::optional<train::Fp8BlockFormat>> format = read(
      R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",)"
      R"( "weight_block_size": [64, 32]}})");
  ASSERT_TRUE(format.ok() && *format) << format.status();
  EXPECT_EQ((*format)->blockRows, 64);
  EXPECT_EQ((*format)->blockCols, 32);
  format = read(R"({"quantization_config": {"quant_method": "fp8"}})");
  ASSERT_TRUE(format.ok() && *format);
  EXPECT_EQ((*format)->blockRows, 128);
  format = read(R"({"hidden_size": 8})");
  ASSERT_TRUE(format.ok());
  EXPECT_FALSE(*format);
  train::CheckpointConfig absent(dir.file("absent.json"));
  EXPECT_FALSE(*train::readFp8BlockFormat(absent));
  for (const char *bad :
       {R"({"quantization_config": {"quant_method": "gptq"}})",
        R"({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}})",
        R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})",
        R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": null}})",
        R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}})"}) {
    format = read(bad);
    ASSERT_FALSE(format.ok()) << bad;
    EXPECT_THAT(std::string(format.status().message()),
                HasSubstr("config.json: field 'quantization_config."));
  }
}

} // namespace
