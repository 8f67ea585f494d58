//===- HfQuantization.h - a config's quantization_config --------*- C++ -*-===//
//
// moe-import hf reads one kind of quantized checkpoint: DeepSeek-V3's
// block-quantized FP8 (HF's FineGrainedFP8Config), whose weights moe-run
// --load dequantizes into the training dtype. The config records how the
// checkpoint's weights are stored, not how moec trains: training is FP8
// only where moec's own FP8 options say so.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_IMPORT_HFQUANTIZATION_H
#define MOE_IMPORT_HFQUANTIZATION_H

#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace mlir::moe {

/// One thing moe-import refuses in a quantization_config: the field
/// ("quantization_config.quant_method") and why.
struct QuantizationProblem {
  std::string field, why;
};

/// Every problem of `value`, the quantization_config of a config: anything
/// but quant_method "fp8" with fmt "e4m3" (or none), weight_block_size two
/// positive integers (default [128, 128]), float scales, dynamic
/// activations and FP8 experts, or a field HF's FineGrainedFP8Config does
/// not have.
std::vector<QuantizationProblem>
checkQuantizationConfig(const llvm::json::Value &value);

/// What an accepted quantization_config means, for the import's notes.
std::string describeQuantizationConfig(const llvm::json::Value &value);

} // namespace mlir::moe

#endif // MOE_IMPORT_HFQUANTIZATION_H
