//===- AsyncCheckpoint.h - checkpoints written in the background -*- C++ -*-===//
//
// moe-run --checkpoint-async: a checkpoint's shard is written on a thread
// of its own while the next steps run. Starting one copies the rank's
// parameters and optimizer state into host buffers (the only pause the
// steps see, besides creating the directory), and a thread writes them as
// the rank's shard of the `.partial` directory. The checkpoint becomes
// complete as a synchronous one does (Checkpoint.h): the ranks exchange
// their shards' sizes and checksums, rank 0 writes the manifest and renames
// the directory. That exchange is collective, so it runs on the training
// thread, at the first step boundary where every rank's write is done
// (poll), which the ranks learn from one small all-gather per step while a
// write is pending. The thread itself never communicates.
//
// One checkpoint is in flight at a time: starting the next one first waits
// for and commits the previous one, which bounds the host memory to one
// copy of the rank's state. A process killed during a write leaves the
// `.partial` directory, which is never resumed from, and the previous
// checkpoint intact.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_ASYNCCHECKPOINT_H
#define MOE_RUNTIME_TRAIN_ASYNCCHECKPOINT_H

#include "moe/Runtime/Backend/WeightStore.h"
#include "moe/Runtime/Comm/Communicator.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>

namespace moe::rt::train {

class AsyncCheckpointWriter {
public:
  AsyncCheckpointWriter();
  /// Waits for a write still running; a checkpoint not committed stays
  /// `.partial`.
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter &) = delete;
  AsyncCheckpointWriter &operator=(const AsyncCheckpointWriter &) = delete;

  /// Commits the checkpoint in flight, if any (waiting for its write),
  /// then begins the checkpoint of `stepsDone` steps under `root` from a
  /// copy of `store`'s tensors and starts writing it. A collective call of
  /// `everyone`; `store` may change as soon as it returns.
  absl::Status start(const WeightStore &store, comm::Group &everyone,
                     const std::string &root, int64_t stepsDone,
                     uint64_t dataSeed);
  /// Commits the checkpoint in flight if every rank's write is done.
  /// Returns whether one was committed. A collective call of `everyone`
  /// whenever pending().
  absl::StatusOr<bool> poll(comm::Group &everyone);
  /// Waits for and commits the checkpoint in flight, if any; returns
  /// whether there was one. A collective call of `everyone`.
  absl::StatusOr<bool> finish(comm::Group &everyone);
  /// Whether a checkpoint was started and not yet committed (the same on
  /// every rank).
  bool pending() const;
  /// The directory of the last checkpoint committed ("" before any).
  const std::string &lastCommitted() const { return committed; }

private:
  struct Flight;
  absl::Status commit(comm::Group &everyone);
  std::unique_ptr<Flight> flight;
  std::string committed;
};

/// The seconds MOE_CHECKPOINT_WRITE_DELAY_S asks each asynchronous shard
/// write to wait after writing its file (a test's window to kill the
/// process during a checkpoint); 0 when unset, an error naming the
/// variable when it is not a number of seconds in [0, 3600].
absl::StatusOr<double> checkpointWriteDelay();

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_ASYNCCHECKPOINT_H
