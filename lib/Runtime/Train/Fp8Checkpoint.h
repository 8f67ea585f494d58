//===- Fp8Checkpoint.h - block-quantized FP8 checkpoints --------*- C++ -*-===//
//
// DeepSeek-V3's FP8 checkpoints (and HF's FineGrainedFP8Config): each
// quantized linear weight `W` [out, in] is stored as F8_E4M3 codes beside
// `W_scale_inv`, F32 [ceil(out / R), ceil(in / C)] with R x C the
// quantization_config's weight_block_size (128 x 128); an element's value is
// its code times the scale of its block (edge blocks are partial). moe-run
// --load dequantizes each element in fp32 and rounds it to BF16 (nearest
// even), the values DeepSeek-V3's fp8_cast_bf16.py and HF's dequantizing
// load give, so that an FP8 checkpoint trains as its BF16 conversion does.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_TRAIN_FP8CHECKPOINT_H
#define MOE_LIB_RUNTIME_TRAIN_FP8CHECKPOINT_H

#include "moe/Runtime/IO/Safetensors.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace moe::rt::train {

/// The suffix of a quantized weight's scales: "W" -> "W_scale_inv".
inline constexpr const char kScaleSuffix[] = "_scale_inv";

/// The config.json beside a checkpoint, where from_pretrained reads it:
/// mapped and parsed once, when a reader first needs it (an FP8 tensor's
/// block size, DeepSeek-V3's multi-token-prediction layers), and never for
/// a checkpoint that needs neither.
class CheckpointConfig {
public:
  explicit CheckpointConfig(std::string path) : path_(std::move(path)) {}
  const std::string &path() const { return path_; }
  /// The parsed file; null when `path` is not a regular file (a FIFO is
  /// not opened), a discarded value when it is not JSON.
  const nlohmann::json *json();

private:
  std::string path_;
  bool read = false;
  std::optional<nlohmann::json> parsed;
};

/// A checkpoint's quantization_config (from the config.json beside it):
/// the block size of its weights' scales.
struct Fp8BlockFormat {
  int64_t blockRows = 128, blockCols = 128;
};

/// The quantization_config of `config`, checked: quant_method "fp8", fmt
/// "e4m3" if given, weight_block_size two positive integers (default
/// [128, 128], as HF's; null, HF's per-tensor scales, is refused). None
/// when the file does not exist or has no quantization_config.
absl::StatusOr<std::optional<Fp8BlockFormat>>
readFp8BlockFormat(CheckpointConfig &config);

/// A checkpoint's block format, read from its config.json when the first
/// F8_E4M3 tensor needs it.
class Fp8Config {
public:
  explicit Fp8Config(CheckpointConfig &config) : config(config) {}
  /// The format of F8_E4M3 tensor `name` of `file`; an error when the
  /// config is missing, has no quantization_config or an invalid one.
  absl::StatusOr<Fp8BlockFormat> formatOf(const std::string &file,
                                          const std::string &name);

private:
  CheckpointConfig &config;
  std::optional<absl::StatusOr<std::optional<Fp8BlockFormat>>> read;
};

/// One quantized weight: its codes, its scales and their files (named in
/// errors).
struct Fp8Weight {
  const io::MappedSafetensors::Tensor *codes = nullptr, *scales = nullptr;
  std::string codesFile, scalesFile;
  Fp8BlockFormat format;

  /// The scales' dtype and shape against the weight's and the block size.
  absl::Status check() const;

  /// Elements [first, first + count) of the row-major weight into `out`,
  /// each code times its block's scale in fp32, rounded to BF16. Reads the
  /// scales of the blocks those elements lie in, and only those; a
  /// non-finite one is an error naming the scale and its block.
  absl::Status dequantize(int64_t first, int64_t count, float *out) const;
};

} // namespace moe::rt::train

#endif // MOE_LIB_RUNTIME_TRAIN_FP8CHECKPOINT_H
