//===- CheckpointWrite.h - the phases of writing a checkpoint ---*- C++ -*-===//
//
// saveCheckpoint runs these phases back to back; the asynchronous writer
// (AsyncCheckpoint.h) runs the shard's write on a thread of its own between
// the two collective ones, from a host copy of the rank's tensors. Only
// begin and commit communicate, so the thread never calls into the
// communication layer.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_TRAIN_CHECKPOINTWRITE_H
#define MOE_LIB_RUNTIME_TRAIN_CHECKPOINTWRITE_H

#include "CheckpointManifest.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/IO/Safetensors.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::train {

/// A checkpoint being written: where it goes and what rank 0's manifest
/// will say besides the shards.
struct CheckpointInProgress {
  std::string final, partial;
  /// This rank's shard, inside `partial`.
  std::string shardPath;
  CheckpointManifest manifest;
};

/// What writing one rank's shard gave: its size and XXH64, or why not.
struct ShardOutcome {
  absl::Status status;
  uint64_t bytes = 0, checksum = 0;
};

/// The tensors of `store` that a checkpoint holds (parameters, then
/// optimizer state), as views of its storage.
std::vector<io::TensorView> checkpointTensors(const WeightStore &store);

/// Rank 0 makes the empty `.partial` directory of the checkpoint of
/// `stepsDone` steps under `root`; every rank waits for it. A collective
/// call of `everyone`.
absl::StatusOr<CheckpointInProgress>
beginCheckpoint(const WeightStore &store, comm::Group &everyone,
                const std::string &root, int64_t stepsDone, uint64_t dataSeed);

/// Writes `tensors` as the rank's shard of `checkpoint`. No communication.
ShardOutcome writeShard(const CheckpointInProgress &checkpoint,
                        const std::vector<io::TensorView> &tensors);

/// Gathers every rank's outcome; rank 0 writes the manifest and renames
/// the directory into place. Returns once the checkpoint exists for every
/// rank, or an error on every rank if any could not write. A collective
/// call of `everyone`.
absl::Status commitCheckpoint(CheckpointInProgress checkpoint,
                              const ShardOutcome &mine, comm::Group &everyone);

} // namespace moe::rt::train

#endif // MOE_LIB_RUNTIME_TRAIN_CHECKPOINTWRITE_H
