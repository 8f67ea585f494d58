//===- Checkpoint.h - distributed checkpoints -------------------*- C++ -*-===//
//
// A checkpoint is a directory ROOT/step-NNNNNNNN holding one shard per rank
// (rank-RRRRR.safetensors: the rank's blocks of the parameters and
// optimizer state, FP8 amax histories included) and manifest.json: the step,
// the data seed, the mesh that saved it, every buffer's global shape and
// split, each shard's size and checksum, and a checksum of the manifest
// itself (lib/Runtime/Train/CheckpointManifest.h). Shards are written under a
// temporary directory that becomes the checkpoint by one rename once every
// rank has written and rank 0 has written the manifest: a checkpoint is
// complete or absent.
//
// Loading reads every shard, checks sizes and checksums, assembles each
// buffer's whole tensor from the blocks of the saving mesh and takes this
// rank's block of the loading mesh: a checkpoint loads into any mesh of the
// same model (fsdp4 -> tp2 x dp2). The data position is the step (batches are
// drawn from a hash of seed, step and row), and nothing else draws random
// numbers, so a resumed run continues exactly.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_CHECKPOINT_H
#define MOE_RUNTIME_TRAIN_CHECKPOINT_H

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Engine/Executor.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>

namespace moe::rt::train {

/// What a loaded checkpoint says about the run.
struct CheckpointState {
  std::string path;
  /// Steps done: the step the run continues at.
  int64_t steps = 0;
  uint64_t dataSeed = 0;
};

/// Writes the checkpoint of `stepsDone` steps under `root`. A collective
/// call of `everyone` (the group of every rank of the job).
absl::Status saveCheckpoint(const WeightStore &executor, comm::Group &everyone,
                            const std::string &root, int64_t stepsDone,
                            uint64_t dataSeed);

/// Removes all but the newest `keep` complete checkpoints under `root`
/// (moe-run --checkpoint-keep). Each is first renamed out of the step-*
/// names findCheckpoint reads, so one half removed is never taken for a
/// checkpoint. Incomplete (.partial) directories are left alone. Errors
/// name the directory.
absl::Status pruneCheckpoints(const std::string &root, int64_t keep);

/// `path` itself if it is a checkpoint, else the newest complete one under
/// it; an error naming `path` when there is none.
absl::StatusOr<std::string> findCheckpoint(const std::string &path);

/// Loads checkpoint directory `path` into `executor`'s parameters and
/// optimizer state, resharding from the mesh that saved it. Refuses a
/// missing, unreadable or edited manifest (its checksum, its step against
/// the directory name, its model against the artifact's, its shapes against
/// their splits on its mesh, its shards against that mesh's ranks), a
/// missing, truncated or corrupt shard, a tensor holding NaN or infinity,
/// and a buffer missing or of another shape, naming it.
absl::StatusOr<CheckpointState> loadCheckpoint(WeightStore &executor,
                                               const std::string &path);

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_CHECKPOINT_H
