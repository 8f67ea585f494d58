//===- Checkpoint.cpp - distributed checkpoints ---------------------------===//
#include "moe/Runtime/Train/Checkpoint.h"

#include "moe/Runtime/Engine/Placement.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace moe::rt::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char *kFormat = "moe-checkpoint";
constexpr int kVersion = 1;

std::string stepDirectory(int64_t steps) {
  return absl::StrFormat("step-%08d", steps);
}
std::string shardName(int64_t rank) {
  return absl::StrFormat("rank-%05d.safetensors", rank);
}

/// 64-bit FNV-1a of a file's bytes, in hex: corruption and truncation show.
absl::StatusOr<std::string> checksumOf(const std::string &path,
                                       uint64_t *bytes) {
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path);
  if (!file.ok())
    return file.status();
  uint64_t hash = 0xcbf29ce484222325ull;
  const uint8_t *data = file->data();
  for (size_t i = 0; i < file->size(); ++i)
    hash = (hash ^ data[i]) * 0x100000001b3ull;
  *bytes = file->size();
  return absl::StrFormat("%016x", hash);
}

bool persistent(const Buffer &buffer) {
  return buffer.kind == BufferKind::Parameter ||
         buffer.kind == BufferKind::OptimizerState;
}

Json manifestOf(const Executor &executor, int64_t steps, uint64_t dataSeed) {
  const Program &program = executor.program();
  Json buffers = Json::array();
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (!persistent(buffer))
      continue;
    buffers.push_back({{"name", buffer.name},
                       {"global_shape", executor.globalShape(b)},
                       {"shape", buffer.shape},
                       {"split", buffer.split}});
  }
  return {{"format", kFormat},
          {"version", kVersion},
          {"model", program.model.name},
          {"step", steps},
          {"data_seed", dataSeed},
          {"mesh", {{"axes", program.meshAxes}, {"shape", program.meshShape}}},
          {"buffers", buffers}};
}

} // namespace

absl::Status saveCheckpoint(const Executor &executor, comm::Group &everyone,
                            const std::string &root, int64_t stepsDone,
                            uint64_t dataSeed) {
  fs::path final = fs::path(root) / stepDirectory(stepsDone);
  fs::path partial = final;
  partial += ".partial";
  std::error_code error;
  if (everyone.rank() == 0) {
    fs::remove_all(partial, error);
    fs::create_directories(partial, error);
  }
  if (absl::Status status = everyone.barrier(); !status.ok())
    return status;

  // This rank's shard: its blocks of what it holds.
  std::string shard = (partial / shardName(executor.rank())).string();
  std::vector<io::TensorView> views;
  const Program &program = executor.program();
  for (const std::vector<uint32_t> *set :
       {&executor.parameters(), &executor.optimizerStates()})
    for (uint32_t b : *set)
      views.push_back({program.buffers[b].name, "F32", program.buffers[b].shape,
                       executor.data(b)});
  absl::Status written = error ? absl::InternalError(absl::StrCat(
                                     "cannot create ", partial.string(), ": ",
                                     error.message()))
                               : io::writeSafetensors(shard, views);
  uint64_t bytes = 0;
  std::string checksum;
  if (written.ok()) {
    absl::StatusOr<std::string> sum = checksumOf(shard, &bytes);
    written = sum.status();
    if (sum.ok())
      checksum = *sum;
  }
  // Every rank's outcome, size and checksum reach rank 0 (and a failure
  // every rank, so none waits for a manifest that will not come).
  std::vector<int32_t> mine(5, 0);
  mine[0] = written.ok() ? 0 : 1;
  std::memcpy(&mine[1], &bytes, sizeof(bytes));
  uint64_t hash = checksum.empty() ? 0 : std::stoull(checksum, nullptr, 16);
  std::memcpy(&mine[3], &hash, sizeof(hash));
  std::vector<int32_t> all(5 * everyone.size());
  if (absl::Status status = everyone.allGather(absl::MakeConstSpan(mine),
                                               absl::MakeSpan(all));
      !status.ok())
    return status;
  if (!written.ok())
    return absl::Status(written.code(),
                        absl::StrCat("checkpoint shard ", shard, ": ",
                                     written.message()));
  for (int r = 0; r < everyone.size(); ++r)
    if (all[5 * r] != 0)
      return absl::InternalError(absl::StrCat(
          "checkpoint ", final.string(), ": rank ", r,
          " could not write its shard; the checkpoint is not complete"));

  absl::Status finished = absl::OkStatus();
  if (everyone.rank() == 0) {
    Json manifest = manifestOf(executor, stepsDone, dataSeed);
    Json shards = Json::array();
    for (int r = 0; r < everyone.size(); ++r) {
      uint64_t size = 0, sum = 0;
      std::memcpy(&size, &all[5 * r + 1], sizeof(size));
      std::memcpy(&sum, &all[5 * r + 3], sizeof(sum));
      shards.push_back({{"rank", r},
                        {"file", shardName(r)},
                        {"bytes", size},
                        {"checksum", absl::StrFormat("%016x", sum)}});
    }
    manifest["shards"] = shards;
    absl::StatusOr<io::AtomicFile> file =
        io::AtomicFile::create((partial / "manifest.json").string());
    finished = file.status();
    if (finished.ok())
      finished = file->write(manifest.dump(2) + "\n");
    if (finished.ok())
      finished = file->commit();
    if (finished.ok()) {
      fs::remove_all(final, error);
      fs::rename(partial, final, error);
      if (error)
        finished = absl::InternalError(absl::StrCat(
            "cannot rename ", partial.string(), " to ", final.string(), ": ",
            error.message()));
    }
  }
  // The checkpoint exists for every rank once this returns.
  std::vector<int32_t> outcome = {finished.ok() ? 0 : 1}, outcomes(everyone.size());
  if (absl::Status status = everyone.allGather(absl::MakeConstSpan(outcome),
                                               absl::MakeSpan(outcomes));
      !status.ok())
    return status;
  if (!finished.ok())
    return finished;
  if (outcomes[0] != 0)
    return absl::InternalError(absl::StrCat(
        "checkpoint ", final.string(), ": rank 0 could not finish it"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> findCheckpoint(const std::string &path) {
  if (fs::exists(fs::path(path) / "manifest.json"))
    return path;
  std::string newest;
  std::error_code error;
  for (const fs::directory_entry &entry : fs::directory_iterator(path, error)) {
    std::string name = entry.path().filename().string();
    // Complete checkpoints only: a .partial directory was never finished.
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos &&
        fs::exists(entry.path() / "manifest.json") && name > newest)
      newest = name;
  }
  if (error)
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", path, ": ", error.message()));
  if (newest.empty())
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", path, ": no complete checkpoint (step-*/manifest.json)"));
  return (fs::path(path) / newest).string();
}

absl::StatusOr<CheckpointState> loadCheckpoint(Executor &executor,
                                               const std::string &path) {
  auto refused = [&](const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": ", why));
  };
  std::ifstream in(fs::path(path) / "manifest.json");
  if (!in)
    return refused("no manifest.json (an incomplete checkpoint?)");
  Json manifest = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object() ||
      manifest.value("format", "") != kFormat)
    return refused("manifest.json is not a moe checkpoint manifest");
  if (manifest.value("version", 0) != kVersion)
    return refused(absl::StrCat("manifest version ", manifest.value("version", 0),
                                ", expected ", kVersion));

  // The saving mesh, as a program the placement arithmetic reads.
  Program saved;
  std::map<std::string, uint32_t> savedIndex;
  try {
    saved.meshAxes = manifest.at("mesh").at("axes").get<AxisList>();
    saved.meshShape = manifest.at("mesh").at("shape").get<std::vector<int64_t>>();
    for (const Json &entry : manifest.at("buffers")) {
      Buffer buffer;
      buffer.name = entry.at("name").get<std::string>();
      buffer.shape = entry.at("shape").get<std::vector<int64_t>>();
      buffer.split = entry.at("split").get<std::vector<AxisList>>();
      savedIndex[buffer.name] = static_cast<uint32_t>(saved.buffers.size());
      saved.buffers.push_back(std::move(buffer));
    }
  } catch (const Json::exception &e) {
    return refused(absl::StrCat("malformed manifest.json: ", e.what()));
  }

  // Every shard, checked before any is used.
  struct Shard {
    int64_t rank;
    io::SafetensorsFile file;
  };
  std::vector<Shard> shards;
  for (const Json &entry : manifest.value("shards", Json::array())) {
    std::string file = (fs::path(path) / entry.value("file", "")).string();
    uint64_t bytes = 0;
    absl::StatusOr<std::string> sum = checksumOf(file, &bytes);
    if (!sum.ok())
      return refused(absl::StrCat("shard ", file, " is missing or unreadable"));
    if (bytes != entry.value("bytes", uint64_t(0)))
      return refused(absl::StrCat("shard ", file, " has ", bytes,
                                  " bytes, the manifest says ",
                                  entry.value("bytes", uint64_t(0)),
                                  " (truncated?)"));
    if (*sum != entry.value("checksum", ""))
      return refused(absl::StrCat("shard ", file,
                                  " does not match its checksum (corrupt)"));
    absl::StatusOr<io::SafetensorsFile> parsed = io::readSafetensors(file);
    if (!parsed.ok())
      return parsed.status();
    shards.push_back({entry.value("rank", int64_t(0)), std::move(*parsed)});
  }

  const Program &program = executor.program();
  for (const std::vector<uint32_t> *set :
       {&executor.parameters(), &executor.optimizerStates()})
    for (uint32_t b : *set) {
      const Buffer &buffer = program.buffers[b];
      auto found = savedIndex.find(buffer.name);
      if (found == savedIndex.end())
        return refused(absl::StrCat("it has no tensor '", buffer.name, "'"));
      const Buffer &savedBuffer = saved.buffers[found->second];
      std::vector<int64_t> global = executor.globalShape(b);
      engine::Placement anyRank(saved, 0);
      if (anyRank.globalShape(savedBuffer) != global)
        return refused(absl::StrCat("tensor '", buffer.name,
                                    "' has another shape than the model's"));
      int64_t count = 1;
      for (int64_t d : global)
        count *= d;
      // The whole tensor from the saving ranks' blocks (replicas agree).
      std::vector<float> whole(count);
      std::vector<bool> filled(count, false);
      for (const Shard &shard : shards) {
        const io::TensorData *tensor = shard.file.find(buffer.name);
        if (!tensor || tensor->isInteger() ||
            tensor->shape != savedBuffer.shape)
          continue;
        engine::Placement(saved, shard.rank)
            .forEachRun(savedBuffer, [&](int64_t local, int64_t index,
                                         int64_t length) {
              std::copy_n(tensor->f32.begin() + local, length,
                          whole.begin() + index);
              std::fill_n(filled.begin() + index, length, true);
            });
      }
      if (std::find(filled.begin(), filled.end(), false) != filled.end())
        return refused(absl::StrCat("tensor '", buffer.name,
                                    "' is not complete in its shards"));
      float *data = executor.data(b);
      executor.placementOf().forEachRun(
          buffer, [&](int64_t local, int64_t index, int64_t length) {
            std::copy_n(whole.begin() + index, length, data + local);
          });
    }
  CheckpointState state;
  state.path = path;
  state.steps = manifest.value("step", int64_t(0));
  state.dataSeed = manifest.value("data_seed", uint64_t(0));
  return state;
}

} // namespace moe::rt::train
