//===- Checkpoint.cpp - distributed checkpoints ---------------------------===//
#include "moe/Runtime/Train/Checkpoint.h"

#include "CheckpointWrite.h"

#include "moe/Runtime/Engine/Placement.h"
#include "moe/Runtime/IO/Checksum.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace moe::rt::train {
namespace {

namespace fs = std::filesystem;

/// XXH64 of a file's bytes (io::contentChecksum): corruption and
/// truncation show.
absl::StatusOr<uint64_t> checksumOf(const std::string &path, uint64_t *bytes) {
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path);
  if (!file.ok())
    return file.status();
  *bytes = file->size();
  return io::contentChecksum(absl::MakeConstSpan(file->data(), file->size()));
}

bool persistent(const Buffer &buffer) {
  return buffer.kind == BufferKind::Parameter ||
         buffer.kind == BufferKind::OptimizerState;
}

/// The manifest of `executor`'s state after `steps` steps (shards to add).
CheckpointManifest manifestOf(const WeightStore &executor, int64_t steps,
                              uint64_t dataSeed) {
  const Program &program = executor.program();
  CheckpointManifest manifest;
  manifest.model = program.model.name;
  manifest.step = steps;
  manifest.dataSeed = dataSeed;
  manifest.meshAxes = program.meshAxes;
  manifest.meshShape = program.meshShape;
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    if (persistent(buffer))
      manifest.buffers.push_back(
          {buffer.name, executor.globalShape(b), buffer.shape, buffer.split});
  }
  return manifest;
}

} // namespace

std::vector<io::TensorView> checkpointTensors(const WeightStore &store) {
  std::vector<io::TensorView> views;
  const Program &program = store.program();
  for (const std::vector<uint32_t> *set :
       {&store.parameters(), &store.optimizerStates()})
    for (uint32_t b : *set)
      views.push_back({program.buffers[b].name,
                       safetensorsName(program.buffers[b].dtype),
                       program.buffers[b].shape, store.data(b)});
  return views;
}

absl::StatusOr<CheckpointInProgress>
beginCheckpoint(const WeightStore &store, comm::Group &everyone,
                const std::string &root, int64_t stepsDone, uint64_t dataSeed) {
  fs::path final = fs::path(root) / checkpointDirectoryName(stepsDone);
  fs::path partial = final;
  partial += ".partial";
  std::error_code error;
  if (everyone.rank() == 0) {
    fs::remove_all(partial, error);
    fs::create_directories(partial, error);
  }
  // Rank 0's outcome reaches every rank, so none writes into a directory
  // that is not there.
  std::vector<int32_t> made = {error ? 1 : 0}, all(everyone.size());
  if (absl::Status status =
          everyone.allGather(absl::MakeConstSpan(made), absl::MakeSpan(all));
      !status.ok())
    return status;
  if (error)
    return absl::InternalError(absl::StrCat("cannot create ", partial.string(),
                                            ": ", error.message()));
  if (all[0] != 0)
    return absl::InternalError(absl::StrCat("checkpoint ", final.string(),
                                            ": rank 0 could not create ",
                                            partial.string()));
  CheckpointInProgress checkpoint;
  checkpoint.final = final.string();
  checkpoint.partial = partial.string();
  checkpoint.shardPath = (partial / shardFileName(store.rank())).string();
  checkpoint.manifest = manifestOf(store, stepsDone, dataSeed);
  return checkpoint;
}

ShardOutcome writeShard(const CheckpointInProgress &checkpoint,
                        const std::vector<io::TensorView> &tensors) {
  ShardOutcome outcome;
  outcome.status = io::writeSafetensors(checkpoint.shardPath, tensors);
  if (outcome.status.ok()) {
    absl::StatusOr<uint64_t> sum =
        checksumOf(checkpoint.shardPath, &outcome.bytes);
    outcome.status = sum.status();
    if (sum.ok())
      outcome.checksum = *sum;
  }
  return outcome;
}

absl::Status commitCheckpoint(CheckpointInProgress checkpoint,
                              const ShardOutcome &mine, comm::Group &everyone) {
  // Every rank's outcome, size and checksum reach rank 0 (and a failure
  // every rank, so none waits for a manifest that will not come).
  std::vector<int32_t> words(5, 0);
  words[0] = mine.status.ok() ? 0 : 1;
  std::memcpy(&words[1], &mine.bytes, sizeof(mine.bytes));
  std::memcpy(&words[3], &mine.checksum, sizeof(mine.checksum));
  std::vector<int32_t> all(5 * everyone.size());
  if (absl::Status status =
          everyone.allGather(absl::MakeConstSpan(words), absl::MakeSpan(all));
      !status.ok())
    return status;
  if (!mine.status.ok())
    return absl::Status(mine.status.code(),
                        absl::StrCat("checkpoint shard ", checkpoint.shardPath,
                                     ": ", mine.status.message()));
  for (int r = 0; r < everyone.size(); ++r)
    if (all[5 * r] != 0)
      return absl::InternalError(absl::StrCat(
          "checkpoint ", checkpoint.final, ": rank ", r,
          " could not write its shard; the checkpoint is not complete"));

  absl::Status finished = absl::OkStatus();
  if (everyone.rank() == 0) {
    CheckpointManifest &manifest = checkpoint.manifest;
    for (int r = 0; r < everyone.size(); ++r) {
      uint64_t size = 0, sum = 0;
      std::memcpy(&size, &all[5 * r + 1], sizeof(size));
      std::memcpy(&sum, &all[5 * r + 3], sizeof(sum));
      manifest.shards.push_back(
          {r, shardFileName(r), size, io::formatChecksum(sum)});
    }
    fs::path partial = checkpoint.partial, final = checkpoint.final;
    absl::StatusOr<io::AtomicFile> file =
        io::AtomicFile::create((partial / "manifest.json").string());
    finished = file.status();
    if (finished.ok())
      finished = file->write(encodeManifest(manifest));
    if (finished.ok())
      finished = file->commit();
    if (finished.ok()) {
      std::error_code error;
      fs::remove_all(final, error);
      fs::rename(partial, final, error);
      if (error)
        finished = absl::InternalError(absl::StrCat(
            "cannot rename ", partial.string(), " to ", final.string(), ": ",
            error.message()));
    }
  }
  // The checkpoint exists for every rank once this returns.
  std::vector<int32_t> outcome = {finished.ok() ? 0 : 1},
                       outcomes(everyone.size());
  if (absl::Status status = everyone.allGather(absl::MakeConstSpan(outcome),
                                               absl::MakeSpan(outcomes));
      !status.ok())
    return status;
  if (!finished.ok())
    return finished;
  if (outcomes[0] != 0)
    return absl::InternalError(absl::StrCat("checkpoint ", checkpoint.final,
                                            ": rank 0 could not finish it"));
  return absl::OkStatus();
}

absl::Status saveCheckpoint(const WeightStore &executor, comm::Group &everyone,
                            const std::string &root, int64_t stepsDone,
                            uint64_t dataSeed) {
  absl::StatusOr<CheckpointInProgress> checkpoint =
      beginCheckpoint(executor, everyone, root, stepsDone, dataSeed);
  if (!checkpoint.ok())
    return checkpoint.status();
  ShardOutcome mine = writeShard(*checkpoint, checkpointTensors(executor));
  return commitCheckpoint(std::move(*checkpoint), mine, everyone);
}

/// The names of the complete checkpoints directly under `root`, oldest
/// first (their step numbers are zero-padded).
static absl::StatusOr<std::vector<std::string>>
completeCheckpoints(const std::string &root) {
  std::vector<std::string> names;
  std::error_code error;
  for (const fs::directory_entry &entry : fs::directory_iterator(root, error)) {
    std::string name = entry.path().filename().string();
    // Complete checkpoints only: a .partial directory was never finished.
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos &&
        fs::exists(entry.path() / "manifest.json"))
      names.push_back(name);
  }
  if (error)
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", root, ": ", error.message()));
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status pruneCheckpoints(const std::string &root, int64_t keep) {
  if (keep < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints under ", root, ": keep ", keep,
                     " of them? at least the newest must stay"));
  absl::StatusOr<std::vector<std::string>> names = completeCheckpoints(root);
  if (!names.ok())
    return names.status();
  for (size_t i = 0; i + keep < names->size(); ++i) {
    fs::path old = fs::path(root) / (*names)[i];
    fs::path doomed = old;
    doomed += ".removing";
    std::error_code error;
    fs::rename(old, doomed, error);
    if (!error)
      fs::remove_all(doomed, error);
    if (error)
      return absl::InternalError(
          absl::StrCat("cannot remove the old checkpoint ", old.string(), ": ",
                       error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> findCheckpoint(const std::string &path) {
  if (fs::exists(fs::path(path) / "manifest.json"))
    return path;
  absl::StatusOr<std::vector<std::string>> names = completeCheckpoints(path);
  if (!names.ok())
    return names.status();
  if (names->empty())
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", path, ": no complete checkpoint (step-*/manifest.json)"));
  return (fs::path(path) / names->back()).string();
}

absl::StatusOr<CheckpointState> loadCheckpoint(WeightStore &executor,
                                               const std::string &path) {
  auto refused = [&](const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": ", why));
  };
  absl::StatusOr<CheckpointManifest> manifest = readManifest(path);
  if (!manifest.ok())
    return manifest.status();
  const Program &program = executor.program();
  if (manifest->model != program.model.name)
    return refused(absl::StrCat("manifest field 'model' is '", manifest->model,
                                "', the artifact's model is '",
                                program.model.name, "'"));

  // The saving mesh, as a program the placement arithmetic reads.
  Program saved = savedLayout(*manifest);
  std::map<std::string, uint32_t> savedIndex;
  for (uint32_t b = 0; b < saved.buffers.size(); ++b)
    savedIndex[saved.buffers[b].name] = b;
  std::set<std::string> modelBuffers;
  for (const std::vector<uint32_t> *set :
       {&executor.parameters(), &executor.optimizerStates()})
    for (uint32_t b : *set)
      modelBuffers.insert(program.buffers[b].name);
  for (const Buffer &buffer : saved.buffers)
    if (!modelBuffers.count(buffer.name))
      return refused(absl::StrCat("it has a tensor '", buffer.name,
                                  "' that the model does not have"));

  // Every shard, checked before any is used: its size and checksum, then
  // that it holds exactly the manifest's blocks, finite.
  struct Shard {
    int64_t rank;
    io::SafetensorsFile file;
  };
  std::vector<Shard> shards;
  for (const ManifestShard &entry : manifest->shards) {
    std::string file = (fs::path(path) / entry.file).string();
    absl::StatusOr<io::MappedFile> mapped = io::MappedFile::open(file);
    if (!mapped.ok())
      return refused(absl::StrCat("shard ", file, " is missing or unreadable (",
                                  mapped.status().message(), ")"));
    if (mapped->size() != entry.bytes)
      return refused(absl::StrCat("shard ", file, " has ", mapped->size(),
                                  " bytes, the manifest says ", entry.bytes,
                                  " (truncated?)"));
    std::string sum = io::formatChecksum(io::contentChecksum(
        absl::MakeConstSpan(mapped->data(), mapped->size())));
    if (sum != entry.checksum)
      return refused(absl::StrCat("shard ", file,
                                  " does not match its checksum (corrupt): "
                                  "the manifest says ",
                                  entry.checksum, ", the file hashes to ", sum));
    absl::StatusOr<io::SafetensorsFile> parsed =
        io::parseSafetensors(mapped->data(), mapped->size(), file);
    if (!parsed.ok())
      return parsed.status();
    for (const Buffer &buffer : saved.buffers) {
      const io::TensorData *tensor = parsed->find(buffer.name);
      if (!tensor)
        return refused(absl::StrCat("shard ", file, " has no tensor '",
                                    buffer.name, "'"));
      // Shards hold each buffer in its dtype; the manifest (format 2)
      // records none, so its layout's buffers are F32, as all are today.
      const char *dtype = safetensorsName(buffer.dtype);
      if (tensor->dtype != dtype || tensor->shape != buffer.shape)
        return refused(absl::StrCat(
            "shard ", file, ": tensor '", buffer.name, "' is ", tensor->dtype,
            " [", absl::StrJoin(tensor->shape, ", "), "], the manifest says ",
            dtype, " [", absl::StrJoin(buffer.shape, ", "), "]"));
      if (absl::Status s =
              io::checkFinite(*tensor, absl::StrCat("checkpoint ", path,
                                                    ": shard ", file));
          !s.ok())
        return s;
    }
    if (parsed->tensors.size() != saved.buffers.size())
      for (const io::TensorData &tensor : parsed->tensors)
        if (!savedIndex.count(tensor.name))
          return refused(absl::StrCat("shard ", file, " has a tensor '",
                                      tensor.name,
                                      "' that the manifest does not list"));
    shards.push_back({entry.rank, std::move(*parsed)});
  }

  for (const std::vector<uint32_t> *set :
       {&executor.parameters(), &executor.optimizerStates()})
    for (uint32_t b : *set) {
      const Buffer &buffer = program.buffers[b];
      auto found = savedIndex.find(buffer.name);
      if (found == savedIndex.end())
        return refused(absl::StrCat("it has no tensor '", buffer.name, "'"));
      const Buffer &savedBuffer = saved.buffers[found->second];
      std::vector<int64_t> global = executor.globalShape(b);
      const std::vector<int64_t> &savedGlobal =
          manifest->buffers[found->second].globalShape;
      if (savedGlobal != global)
        return refused(absl::StrCat(
            "tensor '", buffer.name, "' has another shape than the model's: [",
            absl::StrJoin(savedGlobal, ", "), "] in the checkpoint, [",
            absl::StrJoin(global, ", "), "] in the model"));
      int64_t count = 1;
      for (int64_t d : global)
        count *= d;
      // The whole tensor from the saving ranks' blocks (replicas agree).
      std::vector<float> whole(count);
      std::vector<bool> filled(count, false);
      for (const Shard &shard : shards) {
        const io::TensorData *tensor = shard.file.find(buffer.name);
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
  state.steps = manifest->step;
  state.dataSeed = manifest->dataSeed;
  return state;
}

} // namespace moe::rt::train
