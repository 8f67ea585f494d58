//===- Fp8Checkpoint.cpp - block-quantized FP8 checkpoints ----------------===//
#include "Fp8Checkpoint.h"

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/IO/Float16.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace moe::rt::train {

namespace {

using Json = nlohmann::json;

/// Every E4M3 code's value, decoded once: a checkpoint has billions.
const std::array<float, 256> &e4m3Values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> table;
    for (int code = 0; code < 256; ++code)
      table[code] =
          cpu::decodeFp8(static_cast<uint8_t>(code), cpu::Fp8Format::E4M3);
    return table;
  }();
  return values;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A config value as an error shows it: a string's text, else its JSON,
/// cut short.
std::string shown(const Json &value) {
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

absl::Status badField(const std::string &configPath, const std::string &field,
                      const std::string &why) {
  return absl::InvalidArgumentError(absl::StrCat(
      configPath, ": field 'quantization_config.", field, "': ", why));
}

} // namespace

const Json *CheckpointConfig::json() {
  if (!read) {
    read = true;
    if (absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path_);
        file.ok()) {
      const char *text = reinterpret_cast<const char *>(file->data());
      parsed = Json::parse(text, text + file->size(), nullptr,
                           /*allow_exceptions=*/false);
    }
  }
  return parsed ? &*parsed : nullptr;
}

absl::StatusOr<std::optional<Fp8BlockFormat>>
readFp8BlockFormat(CheckpointConfig &checkpointConfig) {
  const std::string &configPath = checkpointConfig.path();
  const Json *parsed = checkpointConfig.json();
  if (!parsed)
    return std::optional<Fp8BlockFormat>();
  const Json &config = *parsed;
  if (config.is_discarded() || !config.is_object())
    return absl::InvalidArgumentError(
        absl::StrCat(configPath, ": expected a JSON object"));
  auto quantization = config.find("quantization_config");
  if (quantization == config.end() || quantization->is_null())
    return std::optional<Fp8BlockFormat>();
  if (!quantization->is_object())
    return absl::InvalidArgumentError(absl::StrCat(
        configPath, ": field 'quantization_config': expected an object"));
  auto method = quantization->find("quant_method");
  if (method == quantization->end() || !method->is_string() ||
      *method != "fp8")
    return badField(configPath, "quant_method",
                    absl::StrCat(method == quantization->end()
                                     ? "missing"
                                     : absl::StrCat("'", shown(*method), "'"),
                                 "; moe-run --load dequantizes 'fp8' "
                                 "(block-quantized E4M3) only"));
  if (auto fmt = quantization->find("fmt");
      fmt != quantization->end() && !fmt->is_null() &&
      (!fmt->is_string() || *fmt != "e4m3"))
    return badField(configPath, "fmt",
                    absl::StrCat("'", shown(*fmt), "'; expected 'e4m3'"));
  Fp8BlockFormat format;
  auto block = quantization->find("weight_block_size");
  if (block == quantization->end())
    return format;
  if (block->is_null() || !block->is_array() || block->size() != 2 ||
      !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
      (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0)
    return badField(configPath, "weight_block_size",
                    absl::StrCat(shown(*block),
                                 "; expected two positive integers (per-tensor "
                                 "scales are not implemented)"));
  format.blockRows = (*block)[0].get<int64_t>();
  format.blockCols = (*block)[1].get<int64_t>();
  return format;
}

absl::StatusOr<Fp8BlockFormat> Fp8Config::formatOf(const std::string &file,
                                                   const std::string &name) {
  if (!read)
    read = readFp8BlockFormat(config);
  if (!read->ok())
    return read->status();
  const std::string &configPath = config.path();
  if (!**read)
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": tensor '", name, "' is F8_E4M3, but ",
        config.json() ? configPath + " has no quantization_config"
                      : "there is no " + configPath +
                            " with a quantization_config",
        " to say how its scales apply"));
  return ***read;
}

absl::Status Fp8Weight::check() const {
  const std::string &name = codes->name;
  if (codes->shape.size() != 2)
    return absl::InvalidArgumentError(absl::StrCat(
        codesFile, ": tensor '", name, "' is F8_E4M3 of shape [",
        absl::StrJoin(codes->shape, ", "),
        "]; block-quantized weights are matrices"));
  if (scales->dtype != "F32")
    return absl::InvalidArgumentError(
        absl::StrCat(scalesFile, ": tensor '", scales->name, "' is ",
                     scales->dtype, "; the scales of '", name,
                     "' are expected as F32"));
  std::vector<int64_t> expected = {
      ceilDiv(codes->shape[0], format.blockRows),
      ceilDiv(codes->shape[1], format.blockCols)};
  if (scales->shape != expected)
    return absl::InvalidArgumentError(absl::StrCat(
        scalesFile, ": tensor '", scales->name, "' has shape [",
        absl::StrJoin(scales->shape, ", "), "], but '", name, "' of shape [",
        absl::StrJoin(codes->shape, ", "), "] in blocks of [",
        format.blockRows, ", ", format.blockCols,
        "] (quantization_config.weight_block_size) needs [",
        absl::StrJoin(expected, ", "), "]"));
  return absl::OkStatus();
}

absl::Status Fp8Weight::dequantize(int64_t first, int64_t count,
                                   float *out) const {
  const std::array<float, 256> &values = e4m3Values();
  int64_t columns = codes->shape[1], scaleColumns = scales->shape[1];
  for (int64_t done = 0; done < count;) {
    // The elements from `index` to the end of its block's columns (or of
    // the range) share one scale.
    int64_t index = first + done;
    int64_t row = index / columns, column = index % columns;
    int64_t blockEnd =
        std::min(columns, (column / format.blockCols + 1) * format.blockCols);
    int64_t length = std::min(count - done, blockEnd - column);
    int64_t scaleIndex =
        row / format.blockRows * scaleColumns + column / format.blockCols;
    float scale;
    std::memcpy(&scale, scales->bytes + 4 * scaleIndex, 4);
    if (absl::Status s = io::checkFinite(scales->name, scales->shape, &scale,
                                         scaleIndex, 1, scalesFile);
        !s.ok())
      return s;
    const uint8_t *code = codes->bytes + index;
    for (int64_t i = 0; i < length; ++i)
      out[done + i] = io::bf16ToFloat(io::floatToBf16(values[code[i]] * scale));
    done += length;
  }
  return absl::OkStatus();
}

} // namespace moe::rt::train
