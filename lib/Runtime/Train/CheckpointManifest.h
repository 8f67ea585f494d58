//===- CheckpointManifest.h - a checkpoint's manifest.json ------*- C++ -*-===//
//
// Internal to moe_runtime_train. The manifest (format "moe-checkpoint",
// version 2) is a JSON object:
//
//   format, version, model, step, data_seed,
//   mesh: {axes: [str], shape: [int]}          the mesh that saved it
//   buffers: [{name, global_shape, shape, split}]  shape: one rank's block
//   shards: [{rank, file, bytes, checksum}]    one per rank of that mesh
//   manifest_checksum: "xxh64:<16 hex digits>"
//
// manifest_checksum is io::contentChecksum of the manifest's canonical
// text: the object without manifest_checksum, serialised compactly with
// its keys sorted (nlohmann::json's dump(); Python's json.dumps(m,
// separators=(",", ":"), sort_keys=True, ensure_ascii=False)). A hand edit
// of any value therefore fails the checksum; whitespace does not matter.
// The reader verifies it before it uses anything else in the file, then
// checks every field and what the fields imply about each other.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_TRAIN_CHECKPOINTMANIFEST_H
#define MOE_LIB_RUNTIME_TRAIN_CHECKPOINTMANIFEST_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::train {

/// A persistent buffer as the saving mesh held it.
struct ManifestBuffer {
  std::string name;
  std::vector<int64_t> globalShape;
  /// One rank's block, and the mesh axes each dimension is split over
  /// (empty: not split).
  std::vector<int64_t> shape;
  std::vector<AxisList> split;
};

/// The shard one rank of the saving mesh wrote.
struct ManifestShard {
  int64_t rank = 0;
  std::string file;
  uint64_t bytes = 0;
  /// io::formatChecksum of the file's bytes.
  std::string checksum;
};

struct CheckpointManifest {
  std::string model;
  /// Steps done.
  int64_t step = 0;
  uint64_t dataSeed = 0;
  AxisList meshAxes;
  std::vector<int64_t> meshShape;
  std::vector<ManifestBuffer> buffers;
  std::vector<ManifestShard> shards;
};

/// "step-00000006": the directory of the checkpoint of `steps` steps.
std::string checkpointDirectoryName(int64_t steps);
/// "rank-00003.safetensors": the shard of `rank`.
std::string shardFileName(int64_t rank);

/// The text of manifest.json, manifest_checksum included.
std::string encodeManifest(const CheckpointManifest &manifest);

/// Reads `directory`/manifest.json: its checksum first, then every field,
/// then that the step is the directory's, the mesh is valid, each buffer's
/// global_shape is its shape split on the mesh and the shards are the
/// mesh's ranks 0..n-1 under their file names. Errors start "checkpoint
/// `directory`: " and name the field and the values that disagree.
absl::StatusOr<CheckpointManifest> readManifest(const std::string &directory);

/// The saving mesh and the buffers' blocks as a Program, for
/// engine::Placement's rank arithmetic.
Program savedLayout(const CheckpointManifest &manifest);

} // namespace moe::rt::train

#endif // MOE_LIB_RUNTIME_TRAIN_CHECKPOINTMANIFEST_H
