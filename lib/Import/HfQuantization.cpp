//===- HfQuantization.cpp - a config's quantization_config ----------------===//
//
// The fields of HF's FineGrainedFP8Config (transformers 5) and DeepSeek-V3's
// "fmt". The ones that say how weights are stored must hold what moe-run
// --load dequantizes; the ones that say only how HF runs inference
// (dequantize, which modules to convert) are accepted: --load goes by each
// tensor's stored dtype and its scales, whichever modules those are.
//
//===----------------------------------------------------------------------===//
#include "moe/Import/HfQuantization.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {

constexpr llvm::StringLiteral kPrefix = "quantization_config.";

/// A value as a message shows it, cut short.
std::string shown(const json::Value &value) {
  std::string text;
  if (std::optional<llvm::StringRef> string = value.getAsString())
    text = string->str();
  else
    llvm::raw_string_ostream(text) << value;
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

/// The block size of weight_block_size, or none when it is not two
/// positive integers.
std::optional<std::pair<int64_t, int64_t>>
blockSize(const json::Value &value) {
  const json::Array *array = value.getAsArray();
  if (!array || array->size() != 2)
    return std::nullopt;
  std::optional<int64_t> rows = (*array)[0].getAsInteger();
  std::optional<int64_t> cols = (*array)[1].getAsInteger();
  if (!rows || !cols || *rows <= 0 || *cols <= 0)
    return std::nullopt;
  return std::make_pair(*rows, *cols);
}

} // namespace

std::vector<QuantizationProblem>
mlir::moe::checkQuantizationConfig(const json::Value &value) {
  std::vector<QuantizationProblem> problems;
  auto refuse = [&](llvm::StringRef field, const llvm::Twine &why) {
    problems.push_back({(kPrefix + field).str(), why.str()});
  };
  const json::Object *config = value.getAsObject();
  if (!config) {
    problems.push_back({"quantization_config", "expected an object"});
    return problems;
  }
  // A string field that must be absent (HF's default) or one value; a
  // null only where HF ignores the field (DeepSeek-V3's fmt).
  auto expect = [&](llvm::StringRef field, llvm::StringRef implemented,
                    llvm::StringRef why, bool nullable = false) {
    const json::Value *got = config->get(field);
    if (got && !(nullable && got->kind() == json::Value::Null) &&
        got->getAsString() != std::optional(implemented))
      refuse(field, "'" + shown(*got) + "': " + why);
  };
  const json::Value *method = config->get("quant_method");
  if (!method)
    refuse("quant_method", "missing; moe-run --load dequantizes 'fp8' "
                           "(block-quantized E4M3) checkpoints only");
  else
    expect("quant_method", "fp8",
           "moe-run --load dequantizes 'fp8' (block-quantized E4M3) "
           "checkpoints only");
  expect("fmt", "e4m3", "moe-run --load reads E4M3 weights only",
         /*nullable=*/true);
  expect("scale_fmt", "float",
         "moe-run --load reads F32 scales only (not ue8m0 exponents)");
  expect("expert_dtype", "fp8",
         "moe-run --load reads FP8 experts only (not FP4)");
  expect("activation_scheme", "dynamic",
         "moe-run --load reads no activation scales (static scales are "
         "tensors of their own)");
  if (const json::Value *block = config->get("weight_block_size");
      block && !blockSize(*block))
    refuse("weight_block_size",
           "'" + shown(*block) +
               "': expected two positive integers (per-tensor scales are "
               "not implemented)");
  if (const json::Value *flag = config->get("dequantize");
      flag && flag->kind() != json::Value::Null && !flag->getAsBoolean())
    refuse("dequantize", "'" + shown(*flag) + "': expected true or false");
  for (llvm::StringRef field :
       {"modules_to_not_convert", "ignored_layers", "modules_to_convert"})
    if (const json::Value *list = config->get(field);
        list && list->kind() != json::Value::Null) {
      const json::Array *array = list->getAsArray();
      if (!array || llvm::any_of(*array, [](const json::Value &name) {
            return !name.getAsString();
          }))
        refuse(field, "'" + shown(*list) + "': expected a list of names");
    }
  static constexpr llvm::StringLiteral known[] = {
      "activation_scheme", "dequantize",         "expert_dtype",
      "fmt",               "ignored_layers",     "modules_to_convert",
      "modules_to_not_convert", "quant_method",  "scale_fmt",
      "weight_block_size"};
  for (const auto &[key, unused] : *config)
    if (!llvm::is_contained(known, llvm::StringRef(key)))
      refuse(key, "not a field of an FP8 quantization_config; known: " +
                      llvm::join(llvm::ArrayRef<llvm::StringLiteral>(known),
                                 ", "));
  return problems;
}

std::string mlir::moe::describeQuantizationConfig(const json::Value &value) {
  std::pair<int64_t, int64_t> block(128, 128);
  if (const json::Object *config = value.getAsObject())
    if (const json::Value *size = config->get("weight_block_size"))
      block = blockSize(*size).value_or(block);
  return llvm::formatv(
      "quantization_config: the checkpoint's linear weights are FP8 (E4M3) "
      "with one F32 scale (weight_scale_inv) per {0}x{1} block; moe-run "
      "--load dequantizes them into BF16 values, as DeepSeek-V3's "
      "fp8_cast_bf16.py does; training is not FP8 unless moec --fp8 says "
      "so",
      block.first, block.second);
}
