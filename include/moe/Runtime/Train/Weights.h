//===- Weights.h - parameters and optimizer state as safetensors -*- C++ -*-===//
//
// Weights are saved under their HF Mixtral names, so the file loads into
// transformers' MixtralForCausalLM. A parameter whose name holds "{e}" is a
// stack of per-expert tensors along dimension 0; it is written as one tensor
// per expert ("...experts.0.w1.weight", ...) and read back from either form.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_WEIGHTS_H
#define MOE_RUNTIME_TRAIN_WEIGHTS_H

#include "moe/Runtime/Engine/Executor.h"
#include "moe/Runtime/ExpertNames.h"
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <map>
#include <string>
#include <vector>

namespace moe::rt::train {

/// Which persistent buffers to export.
enum class WeightSet { Parameters, OptimizerState, Both };

/// Views of the executor's buffers of `set` under their export names,
/// stacked experts split (appendExportViews). The views point into the
/// executor's storage.
std::vector<io::TensorView> exportViews(const WeightStore &executor,
                                        WeightSet set);

/// Splits one stacked tensor named with "{e}" into per-expert views; any
/// other name gives one view of the whole tensor.
void appendExportViews(const std::string &name,
                       const std::vector<int64_t> &shape, const float *data,
                       std::vector<io::TensorView> &out);

/// The dtype `moe-run --save` writes (--save-dtype): the fp32 masters as
/// they are, or rounded to nearest even into BF16 (what HF checkpoints of
/// BF16 models hold).
enum class SaveDType { F32, BF16 };
/// "fp32" or "bf16"; anything else is an error listing those.
absl::StatusOr<SaveDType> parseSaveDType(std::string_view text);

/// Writes the chosen buffers to `path` (atomically), with `metadata`, in
/// `dtype`.
absl::Status saveWeights(const WeightStore &executor, const std::string &path,
                         WeightSet set,
                         const std::map<std::string, std::string> &metadata = {},
                         SaveDType dtype = SaveDType::F32);

/// Writes f32 `views` to `path` (atomically) in `dtype`, with `metadata`
/// and the format and producer HF's loaders expect.
absl::Status
writeWeightViews(const std::string &path, std::vector<io::TensorView> views,
                 const std::map<std::string, std::string> &metadata = {},
                 SaveDType dtype = SaveDType::F32);

/// Loads every parameter (and optimizer state, if present in the file and
/// `set` asks for it) from `path`. Missing tensors, shape mismatches,
/// NaN or infinite values and unknown tensors are errors naming the tensor
/// and the file (and the first bad element).
absl::Status loadWeights(WeightStore &executor, const std::string &path,
                         WeightSet set);

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_WEIGHTS_H
