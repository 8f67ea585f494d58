//===- AsyncCheckpoint.cpp - checkpoints written while training goes on ---===//
#include "moe/Runtime/Train/AsyncCheckpoint.h"

#include "CheckpointWrite.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace moe::rt::train {

/// A checkpoint started and not yet committed: its host copy and the
/// thread writing it.
struct AsyncCheckpointWriter::Flight {
  CheckpointInProgress checkpoint;
  /// The copies the views point into; kept until the write ends.
  std::vector<std::vector<uint8_t>> copies;
  std::vector<io::TensorView> tensors;
  ShardOutcome outcome;
  std::atomic<bool> written{false};
  std::thread writer;
};

AsyncCheckpointWriter::AsyncCheckpointWriter() = default;

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (flight && flight->writer.joinable())
    flight->writer.join();
}

bool AsyncCheckpointWriter::pending() const { return flight != nullptr; }

absl::StatusOr<double> checkpointWriteDelay() {
  const char *name = "MOE_CHECKPOINT_WRITE_DELAY_S";
  const char *value = std::getenv(name);
  if (!value || !*value)
    return 0.0;
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0) || seconds > 3600)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be a number of seconds in [0, 3600], got '", value, "'"));
  return seconds;
}

absl::Status AsyncCheckpointWriter::start(const WeightStore &store,
                                          comm::Group &everyone,
                                          const std::string &root,
                                          int64_t stepsDone,
                                          uint64_t dataSeed) {
  if (absl::StatusOr<bool> previous = finish(everyone); !previous.ok())
    return previous.status();
  absl::StatusOr<double> delay = checkpointWriteDelay();
  if (!delay.ok())
    return delay.status();
  absl::StatusOr<CheckpointInProgress> checkpoint =
      beginCheckpoint(store, everyone, root, stepsDone, dataSeed);
  if (!checkpoint.ok())
    return checkpoint.status();

  auto next = std::make_unique<Flight>();
  next->checkpoint = std::move(*checkpoint);
  // The host copy: the steps that follow overwrite the store.
  next->tensors = checkpointTensors(store);
  next->copies.reserve(next->tensors.size());
  for (io::TensorView &view : next->tensors) {
    uint64_t bytes = io::safetensorsDtypeSize(view.dtype);
    for (int64_t d : view.shape)
      bytes *= static_cast<uint64_t>(d);
    const uint8_t *from = static_cast<const uint8_t *>(view.data);
    next->copies.emplace_back(from, from + bytes);
    view.data = next->copies.back().data();
  }
  Flight *running = next.get();
  double seconds = *delay;
  running->writer = std::thread([running, seconds] {
    running->outcome = writeShard(running->checkpoint, running->tensors);
    if (seconds > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    running->written.store(true, std::memory_order_release);
  });
  flight = std::move(next);
  return absl::OkStatus();
}

absl::Status AsyncCheckpointWriter::commit(comm::Group &everyone) {
  flight->writer.join();
  std::unique_ptr<Flight> done = std::move(flight);
  std::string final = done->checkpoint.final;
  if (absl::Status status = commitCheckpoint(std::move(done->checkpoint),
                                             done->outcome, everyone);
      !status.ok())
    return status;
  committed = final;
  return absl::OkStatus();
}

absl::StatusOr<bool> AsyncCheckpointWriter::poll(comm::Group &everyone) {
  if (!flight)
    return false;
  std::vector<int32_t> mine = {
      flight->written.load(std::memory_order_acquire) ? 1 : 0};
  std::vector<int32_t> all(everyone.size());
  if (absl::Status status =
          everyone.allGather(absl::MakeConstSpan(mine), absl::MakeSpan(all));
      !status.ok())
    return status;
  for (int32_t written : all)
    if (!written)
      return false;
  if (absl::Status status = commit(everyone); !status.ok())
    return status;
  return true;
}

absl::StatusOr<bool> AsyncCheckpointWriter::finish(comm::Group &everyone) {
  if (!flight)
    return false;
  if (absl::Status status = commit(everyone); !status.ok())
    return status;
  return true;
}

} // namespace moe::rt::train
