//===- Weights.cpp - parameters and optimizer state as safetensors --------===//
#include "moe/Runtime/Train/Weights.h"

#include "moe/Runtime/Cpu/Kernels.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"

#include <set>

namespace moe::rt::train {

void appendExportViews(const std::string &name,
                       const std::vector<int64_t> &shape, const float *data,
                       std::vector<io::TensorView> &out) {
  if (!isStackedName(name) || shape.empty()) {
    out.push_back({name, "F32", shape, data});
    return;
  }
  std::vector<int64_t> slice(shape.begin() + 1, shape.end());
  int64_t sliceElements = 1;
  for (int64_t d : slice)
    sliceElements *= d;
  for (int64_t e = 0; e < shape[0]; ++e)
    out.push_back({expertName(name, e), "F32", slice,
                   data + e * sliceElements});
}

/// The buffers of `set`, in program order.
static std::vector<uint32_t> buffersOf(const WeightStore &executor,
                                       WeightSet set) {
  std::vector<uint32_t> buffers;
  if (set != WeightSet::OptimizerState)
    buffers = executor.parameters();
  if (set != WeightSet::Parameters)
    buffers.insert(buffers.end(), executor.optimizerStates().begin(),
                   executor.optimizerStates().end());
  return buffers;
}

std::vector<io::TensorView> exportViews(const WeightStore &executor,
                                        WeightSet set) {
  std::vector<io::TensorView> views;
  for (uint32_t index : buffersOf(executor, set)) {
    const Buffer &buffer = executor.program().buffers[index];
    appendExportViews(buffer.name, buffer.shape, executor.data(index), views);
  }
  return views;
}

absl::StatusOr<SaveDType> parseSaveDType(std::string_view text) {
  if (text == "fp32")
    return SaveDType::F32;
  if (text == "bf16")
    return SaveDType::BF16;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown save dtype '", std::string(text), "' (known: fp32, bf16)"));
}

absl::Status saveWeights(const WeightStore &executor, const std::string &path,
                         WeightSet set,
                         const std::map<std::string, std::string> &metadata,
                         SaveDType dtype) {
  return writeWeightViews(path, exportViews(executor, set), metadata, dtype);
}

absl::Status
writeWeightViews(const std::string &path, std::vector<io::TensorView> views,
                 const std::map<std::string, std::string> &metadata,
                 SaveDType dtype) {
  std::map<std::string, std::string> meta = metadata;
  meta.emplace("format", "pt");
  meta.emplace("producer", "moe-run");
  if (dtype == SaveDType::F32)
    return io::writeSafetensors(path, views, meta);
  // BF16: each view rounded to nearest even into its own copy.
  std::vector<std::vector<uint16_t>> rounded(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : views[i].shape)
      n *= d;
    rounded[i].resize(n);
    cpu::castToBf16(static_cast<const float *>(views[i].data),
                    rounded[i].data(), n);
    views[i].dtype = "BF16";
    views[i].data = rounded[i].data();
  }
  return io::writeSafetensors(path, views, meta);
}

absl::Status loadWeights(WeightStore &executor, const std::string &path,
                         WeightSet set) {
  absl::StatusOr<io::SafetensorsFile> file = io::readSafetensors(path);
  if (!file.ok())
    return file.status();
  std::set<std::string> used;
  auto load = [&](const std::string &name, const std::vector<int64_t> &shape,
                  float *dest) -> absl::Status {
    const io::TensorData *tensor = file->find(name);
    if (!tensor)
      return absl::NotFoundError(
          absl::StrCat(path, ": tensor '", name, "' is missing"));
    if (tensor->isInteger())
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name, "' is ", tensor->dtype, ", expected a float"));
    if (tensor->shape != shape)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name, "' has shape [",
          absl::StrJoin(tensor->shape, ", "), "], the model expects [",
          absl::StrJoin(shape, ", "), "]"));
    if (absl::Status s = io::checkFinite(*tensor, path); !s.ok())
      return s;
    std::copy(tensor->f32.begin(), tensor->f32.end(), dest);
    used.insert(name);
    return absl::OkStatus();
  };

  for (uint32_t index : buffersOf(executor, set)) {
    const Buffer &buffer = executor.program().buffers[index];
    float *data = executor.data(index);
    bool stacked = isStackedName(buffer.name);
    // A stacked parameter may be stored whole (our own files) or per expert
    // (HF checkpoints).
    if (!stacked || file->find(buffer.name)) {
      if (absl::Status s = load(buffer.name, buffer.shape, data); !s.ok())
        return s;
      continue;
    }
    std::vector<int64_t> slice(buffer.shape.begin() + 1, buffer.shape.end());
    int64_t sliceElements = buffer.numElements() / buffer.shape[0];
    for (int64_t e = 0; e < buffer.shape[0]; ++e)
      if (absl::Status s = load(expertName(buffer.name, e), slice,
                                data + e * sliceElements);
          !s.ok())
        return s;
  }
  for (const io::TensorData &tensor : file->tensors) {
    bool isState = absl::EndsWith(tensor.name, ".exp_avg") ||
                   absl::EndsWith(tensor.name, ".exp_avg_sq") ||
                   absl::EndsWith(tensor.name, ".fp8_amax_history");
    // Optimizer state in a parameters-only load is ignored on purpose: a
    // checkpoint can be loaded to restart training with fresh moments.
    if (!used.count(tensor.name) && !(isState && set == WeightSet::Parameters))
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", tensor.name, "' is not a parameter of the model"));
  }
  return absl::OkStatus();
}

} // namespace moe::rt::train
