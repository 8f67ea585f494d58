//===- HfCheckpoint.cpp - HF safetensors checkpoints onto any mesh --------===//
//
// Each buffer this rank holds is a block of a whole tensor
// (Placement::forEachRun gives the runs of the block in the whole tensor's
// row-major order). Runs are cut where the source changes (one HF tensor
// per expert of a stacked weight) and, for interleaved RoPE rows, per row;
// each piece is decoded straight from the mapped file into the buffer.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Train/HfCheckpoint.h"

#include "Fp8Checkpoint.h"

#include "moe/Runtime/Engine/Placement.h"
#include "moe/Runtime/ExpertNames.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sys/stat.h>

namespace moe::rt::train {

namespace {

/// What an HF checkpoint holds of a model: its parameters and the routers'
/// selection biases (DeepSeek-V3's gate.e_score_correction_bias, optimizer
/// state here).
bool isHfTensor(const Buffer &buffer) {
  return buffer.kind == BufferKind::Parameter ||
         (buffer.kind == BufferKind::OptimizerState &&
          absl::EndsWith(buffer.name, "e_score_correction_bias"));
}

/// The buffers of isHfTensor this rank holds, in program order.
std::vector<uint32_t> hfBuffers(const WeightStore &store) {
  std::vector<uint32_t> buffers = store.parameters();
  for (uint32_t b : store.optimizerStates())
    if (isHfTensor(store.program().buffers[b]))
      buffers.push_back(b);
  return buffers;
}

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// The checkpoint's files, opened when a tensor in them is first needed.
class Checkpoint {
public:
  /// `path`: a directory with model.safetensors or an index and its
  /// shards, the index's own path (standing for its directory), or one
  /// .safetensors file. Each file is looked at before it is opened, so
  /// that a FIFO, a directory or a symlink loop is named as what it is.
  static absl::StatusOr<Checkpoint> open(const std::string &path) {
    bool indexGiven = absl::EndsWith(path, ".safetensors.index.json");
    if (!indexGiven && !isDirectory(path))
      return openSingle(path, path);
    std::string root =
        indexGiven ? std::filesystem::path(path).parent_path().string() : path;
    if (root.empty())
      root = ".";
    std::string index =
        indexGiven ? path : path + "/model.safetensors.index.json";
    absl::Status indexFound = io::checkRegularFile(index, "checkpoint index");
    if (indexFound.ok())
      return openIndex(root, index);
    if (indexGiven || !absl::IsNotFound(indexFound))
      return indexFound;
    std::string single = path + "/model.safetensors";
    absl::Status singleFound = io::checkRegularFile(single, "checkpoint file");
    if (absl::IsNotFound(singleFound))
      return absl::NotFoundError(absl::StrCat(
          "checkpoint '", path,
          "' has neither model.safetensors nor model.safetensors.index.json"));
    if (!singleFound.ok())
      return singleFound;
    return openSingle(path, single);
  }

  /// Every tensor name, and the file holding it.
  const std::map<std::string, std::string> &names() const { return fileOf; }

  /// The tensor `name`, or null when the checkpoint has none.
  absl::StatusOr<const io::MappedSafetensors::Tensor *>
  find(const std::string &name) {
    auto where = fileOf.find(name);
    if (where == fileOf.end())
      return nullptr;
    auto file = files.find(where->second);
    if (file == files.end()) {
      absl::StatusOr<io::MappedSafetensors> opened =
          io::MappedSafetensors::open(where->second);
      if (!opened.ok())
        return opened.status();
      file = files.emplace(where->second, std::move(*opened)).first;
    }
    const io::MappedSafetensors::Tensor *tensor = file->second.find(name);
    if (!tensor)
      return absl::NotFoundError(absl::StrCat(
          where->second, ": tensor '", name,
          "' is missing, though the checkpoint's index names this file"));
    return tensor;
  }

  std::string fileName(const std::string &name) const {
    auto where = fileOf.find(name);
    return where == fileOf.end() ? root : where->second;
  }

private:
  /// A sharded checkpoint: `index` names each tensor's file in `root`.
  static absl::StatusOr<Checkpoint> openIndex(const std::string &root,
                                              const std::string &index) {
    Checkpoint checkpoint;
    checkpoint.root = root;
    absl::StatusOr<io::MappedFile> text =
        io::MappedFile::open(index, "checkpoint index");
    if (!text.ok())
      return text.status();
    nlohmann::json json = nlohmann::json::parse(
        text->data(), text->data() + text->size(), nullptr,
        /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() ||
        !json.contains("weight_map") || !json["weight_map"].is_object())
      return absl::InvalidArgumentError(absl::StrCat(
          index, ": expected a JSON object with a 'weight_map' object"));
    for (const auto &[key, value] : json.items())
      if (key != "metadata" && key != "weight_map")
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": unknown field '", key,
                         "'; known fields: metadata, weight_map"));
    for (const auto &[name, file] : json["weight_map"].items()) {
      if (!file.is_string() ||
          file.get<std::string>().find('/') != std::string::npos)
        return absl::InvalidArgumentError(absl::StrCat(
            index, ": weight_map['", name,
            "'] is not a file name in the checkpoint's directory"));
      checkpoint.fileOf[name] = root + "/" + file.get<std::string>();
    }
    return checkpoint;
  }

  /// One safetensors file, `file` (given as `root`).
  static absl::StatusOr<Checkpoint> openSingle(const std::string &root,
                                               const std::string &file) {
    Checkpoint checkpoint;
    checkpoint.root = root;
    absl::StatusOr<io::MappedSafetensors> opened =
        io::MappedSafetensors::open(file);
    if (!opened.ok())
      return opened.status();
    for (const io::MappedSafetensors::Tensor &tensor : opened->tensors())
      checkpoint.fileOf[tensor.name] = file;
    checkpoint.files.emplace(file, std::move(*opened));
    return checkpoint;
  }

  std::string root;
  std::map<std::string, std::string> fileOf;
  std::map<std::string, io::MappedSafetensors> files;
};

/// Loads one buffer's block.
class BufferLoader {
public:
  BufferLoader(Checkpoint &checkpoint, Fp8Config &fp8, const Buffer &buffer,
               std::vector<int64_t> global, std::optional<InterleavedRows> rows,
               float *data)
      : checkpoint(checkpoint), fp8(fp8), buffer(buffer),
        global(std::move(global)), rows(rows), data(data) {}

  absl::Status load(const engine::Placement &placement) {
    bool stacked = isStackedName(buffer.name) && !global.empty();
    absl::Status status = absl::OkStatus();
    // A stacked weight stored whole (moe-run's own files) is one tensor.
    absl::StatusOr<const io::MappedSafetensors::Tensor *> whole =
        stacked
            ? checkpoint.find(buffer.name)
            : absl::StatusOr<const io::MappedSafetensors::Tensor *>(nullptr);
    if (!whole.ok())
      return whole.status();
    bool perExpert = stacked && !*whole;
    std::vector<int64_t> sourceShape = global;
    if (perExpert)
      sourceShape.erase(sourceShape.begin());
    int64_t sourceElements = 1;
    for (int64_t d : sourceShape)
      sourceElements *= d;
    int64_t rowElements =
        sourceShape.size() >= 2 ? sourceElements / sourceShape[0] : 1;
    placement.forEachRun(buffer, [&](int64_t local, int64_t index,
                                     int64_t length) {
      while (status.ok() && length > 0) {
        // The piece of the run inside one source tensor and, with
        // interleaved rows, one row.
        int64_t expert = perExpert ? index / sourceElements : 0;
        int64_t within = perExpert ? index % sourceElements : index;
        int64_t piece = std::min(length, sourceElements - within);
        if (rows)
          piece = std::min(piece, rowElements - within % rowElements);
        status = copy(perExpert ? expertName(buffer.name, expert) : buffer.name,
                      sourceShape, within, piece, data + local);
        local += piece;
        index += piece;
        length -= piece;
      }
    });
    return status;
  }

private:
  /// Elements [within, within + count) of tensor `name` (its row mapped
  /// to the checkpoint's layout) into `out`.
  absl::Status copy(const std::string &name, const std::vector<int64_t> &shape,
                    int64_t within, int64_t count, float *out) {
    absl::StatusOr<const io::MappedSafetensors::Tensor *> found =
        checkpoint.find(name);
    if (!found.ok())
      return found.status();
    const io::MappedSafetensors::Tensor *tensor = *found;
    std::string file = checkpoint.fileName(name);
    if (!tensor)
      return absl::NotFoundError(absl::StrCat(
          "checkpoint '", file, "': tensor '", name, "' is missing"));
    if (!checked.count(name)) {
      if (tensor->isFp8()) {
        absl::StatusOr<Fp8Weight> weight = quantized(*tensor, file);
        if (!weight.ok())
          return weight.status();
        fp8Weights.emplace(name, *weight);
      } else if (!tensor->isFloat()) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": tensor '", name,
                                                       "' is ", tensor->dtype,
                                                       ", expected a float"));
      } else if (std::string scales = name + kScaleSuffix;
                 checkpoint.names().count(scales)) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint.fileName(scales), ": tensor '", scales, "' scales '",
            name, "', which is ", tensor->dtype, ", not F8_E4M3"));
      }
      if (tensor->shape != shape)
        return absl::InvalidArgumentError(absl::StrCat(
            file, ": tensor '", name, "' has shape [",
            absl::StrJoin(tensor->shape, ", "), "], the model expects [",
            absl::StrJoin(shape, ", "), "]"));
      checked.insert(name);
    }
    int64_t source = within;
    if (rows) {
      int64_t columns = shape.size() >= 2 ? shape.back() : 1;
      int64_t row = within / columns;
      source = rows->checkpointRow(row) * columns + within % columns;
    }
    if (auto weight = fp8Weights.find(name); weight != fp8Weights.end()) {
      if (absl::Status s = weight->second.dequantize(source, count, out);
          !s.ok())
        return s;
    } else {
      io::MappedSafetensors::decode(*tensor, source, count, out);
    }
    return io::checkFinite(name, shape, out, source, count, file);
  }

  /// The F8_E4M3 tensor `codes` of `file` with its scales, checked.
  absl::StatusOr<Fp8Weight> quantized(const io::MappedSafetensors::Tensor &codes,
                                      const std::string &file) {
    Fp8Weight weight;
    weight.codes = &codes;
    weight.codesFile = file;
    absl::StatusOr<Fp8BlockFormat> format = fp8.formatOf(file, codes.name);
    if (!format.ok())
      return format.status();
    weight.format = *format;
    std::string scales = codes.name + kScaleSuffix;
    absl::StatusOr<const io::MappedSafetensors::Tensor *> found =
        checkpoint.find(scales);
    if (!found.ok())
      return found.status();
    if (!*found)
      return absl::NotFoundError(absl::StrCat(
          file, ": tensor '", codes.name, "' is F8_E4M3, but its scales '",
          scales, "' are missing"));
    weight.scales = *found;
    weight.scalesFile = checkpoint.fileName(scales);
    if (absl::Status s = weight.check(); !s.ok())
      return s;
    return weight;
  }

  Checkpoint &checkpoint;
  Fp8Config &fp8;
  const Buffer &buffer;
  std::vector<int64_t> global;
  std::optional<InterleavedRows> rows;
  float *data;
  std::set<std::string> checked;
  /// The F8_E4M3 tensors among them, with their scales.
  std::map<std::string, Fp8Weight> fp8Weights;
};

/// The tensors a checkpoint may hold of a model: its HF tensors by name,
/// and its stacked ones with their experts.
struct ModelTensors {
  std::set<std::string> names;
  std::vector<std::pair<std::string, int64_t>> stacked;

  /// Whether `name` is one of them, or one expert's tensor of a stacked
  /// one, below the experts stacked there, or the scales of one
  /// (block-quantized FP8 checkpoints).
  bool has(const std::string &tensor) const {
    std::string name =
        absl::EndsWith(tensor, kScaleSuffix)
            ? tensor.substr(0, tensor.size() - std::strlen(kScaleSuffix))
            : tensor;
    if (names.count(name))
      return true;
    for (const auto &[stack, experts] : stacked) {
      int64_t expert = expertIndexOf(name, stack);
      if (expert >= 0 && expert < experts)
        return true;
    }
    return false;
  }
};

/// DeepSeek-V3's multi-token-prediction layers, which its checkpoints hold
/// after the model's: layers [num_hidden_layers, num_hidden_layers +
/// num_nextn_predict_layers) of the checkpoint's config.json. HF's
/// DeepseekV3ForCausalLM does not build them and from_pretrained skips
/// their tensors; moe-import says that moec does not build them either.
struct MtpLayers {
  int64_t first = 0, count = 0;

  /// The layers `config` names; none where it has no such fields (the
  /// tensors they would excuse are then refused).
  static MtpLayers read(CheckpointConfig &config) {
    const nlohmann::json *parsed = config.json();
    if (!parsed || parsed->is_discarded() || !parsed->is_object())
      return {};
    auto hidden = parsed->find("num_hidden_layers");
    auto mtp = parsed->find("num_nextn_predict_layers");
    if (hidden == parsed->end() || mtp == parsed->end() ||
        !hidden->is_number_integer() || !mtp->is_number_integer())
      return {};
    return {hidden->get<int64_t>(), mtp->get<int64_t>()};
  }

  /// Whether `name` is a tensor of one of them ("model.layers.61.*").
  bool holds(const std::string &name) const {
    static constexpr absl::string_view prefix = "model.layers.";
    if (count <= 0 || !absl::StartsWith(name, prefix))
      return false;
    size_t dot = name.find('.', prefix.size());
    int64_t layer;
    return dot != std::string::npos &&
           absl::SimpleAtoi(
               absl::string_view(name).substr(prefix.size(),
                                              dot - prefix.size()),
               &layer) &&
           layer >= first && layer - first < count;
  }
};

} // namespace

int64_t InterleavedRows::checkpointRow(int64_t row) const {
  int64_t group = row / groupRows, within = row % groupRows;
  if (within < offset || within >= offset + rope)
    return row;
  int64_t j = within - offset, half = rope / 2;
  int64_t source = j < half ? 2 * j : 2 * (j - half) + 1;
  return group * groupRows + offset + source;
}

InterleavedLayout::InterleavedLayout(const std::string &configJson) {
  nlohmann::json config =
      nlohmann::json::parse(configJson, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object())
    return;
  interleaved = config.value("rope_interleave", false);
  rope = config.value("qk_rope_head_dim", int64_t{0});
  nope = config.value("qk_nope_head_dim", int64_t{0});
  kvRank = config.value("kv_lora_rank", int64_t{0});
}

std::optional<InterleavedRows>
InterleavedLayout::rowsOf(const std::string &name) const {
  if (!interleaved)
    return std::nullopt;
  if (absl::EndsWith(name, "self_attn.q_b_proj.weight") ||
      absl::EndsWith(name, "self_attn.q_proj.weight"))
    return InterleavedRows{nope + rope, nope, rope};
  if (absl::EndsWith(name, "self_attn.kv_a_proj_with_mqa.weight"))
    return InterleavedRows{kvRank + rope, kvRank, rope};
  return std::nullopt;
}

absl::Status loadHfCheckpoint(WeightStore &store, const std::string &path) {
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::open(path);
  if (!checkpoint.ok())
    return checkpoint.status();
  const Program &program = store.program();
  // What every rank loads: the parameters and the routers' selection
  // biases, whichever ranks hold them, with a stacked tensor's experts.
  ModelTensors model;
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (!isHfTensor(buffer))
      continue;
    model.names.insert(buffer.name);
    if (std::vector<int64_t> global = store.globalShape(b);
        isStackedName(buffer.name) && !global.empty())
      model.stacked.emplace_back(buffer.name, global[0]);
  }
  // The checkpoint's config.json, beside it as from_pretrained reads it:
  // an FP8 checkpoint's block size, DeepSeek-V3's multi-token prediction.
  CheckpointConfig config(
      (isDirectory(path) ? path
       : path.find('/') == std::string::npos
           ? "."
           : path.substr(0, path.rfind('/'))) +
      "/config.json");
  std::optional<MtpLayers> mtp;
  for (const auto &[name, file] : checkpoint->names()) {
    if (model.has(name))
      continue;
    if (!mtp)
      mtp = MtpLayers::read(config);
    if (!mtp->holds(name))
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensor '", name, "' is not a parameter of the model"));
  }

  InterleavedLayout layout(program.model.configJson);
  Fp8Config fp8(config);
  for (uint32_t b : hfBuffers(store)) {
    const Buffer &buffer = program.buffers[b];
    BufferLoader loader(*checkpoint, fp8, buffer, store.globalShape(b),
                        layout.rowsOf(buffer.name), store.data(b));
    if (absl::Status s = loader.load(store.placementOf()); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::Status saveHfCheckpoint(const WeightStore &store, const std::string &path,
                              SaveDType dtype) {
  const Program &program = store.program();
  std::string file = path;
  if (!absl::EndsWith(path, ".safetensors")) {
    if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot make directory '", path, "': ", std::strerror(errno)));
    file = path + "/model.safetensors";
  }
  std::vector<uint32_t> buffers = hfBuffers(store);
  InterleavedLayout layout(program.model.configJson);
  // Interleaved rows are written from permuted copies.
  std::vector<std::vector<float>> copies;
  copies.reserve(buffers.size());
  std::vector<io::TensorView> views;
  for (uint32_t b : buffers) {
    const Buffer &buffer = program.buffers[b];
    const float *data = store.data(b);
    if (std::optional<InterleavedRows> rows = layout.rowsOf(buffer.name);
        rows && buffer.shape.size() == 2) {
      int64_t columns = buffer.shape[1];
      std::vector<float> &copy = copies.emplace_back(buffer.numElements());
      for (int64_t row = 0; row < buffer.shape[0]; ++row)
        std::copy_n(data + row * columns, columns,
                    copy.data() + rows->checkpointRow(row) * columns);
      data = copy.data();
    }
    appendExportViews(buffer.name, buffer.shape, data, views);
  }
  return writeWeightViews(file, std::move(views), {}, dtype);
}

} // namespace moe::rt::train
