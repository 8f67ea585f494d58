//===- TensorBoard.h - scalar metrics as TensorBoard event files -*- C++
//-*-===//
//
// TensorBoardWriter writes a run's metrics where TensorBoard reads them:
// DIR/events.out.tfevents.<seconds>.<host>.<pid>, a sequence of TFRecords
// (length, masked CRC32C of the length, an Event message, masked CRC32C of
// it), the first Event naming the format version ("brain.Event:2"), then
// one Event per step with a Summary of simple_value scalars tagged by the
// metrics file's keys (loss, grad_norm, lr, tokens_per_s, flops_per_s and
// the record's extras: ce_loss, aux_loss, eval_loss...). Each step's Event
// is flushed, so TensorBoard follows a running job.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_TENSORBOARD_H
#define MOE_RUNTIME_IO_TENSORBOARD_H

#include "moe/Runtime/IO/Metrics.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace moe::rt::io {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, as
/// TFRecord framing uses it.
uint32_t crc32c(absl::string_view data);
/// TFRecord's masked CRC: the CRC rotated right by 15 bits plus a constant,
/// so that a CRC stored in the data it covers does not check itself.
uint32_t maskedCrc32c(absl::string_view data);
/// One TFRecord: the framing around `payload`.
std::string tfRecord(absl::string_view payload);

class TensorBoardWriter {
public:
  /// Creates `dir` if needed and a new event file in it, written with the
  /// version Event. Errors name the directory or file.
  static absl::StatusOr<TensorBoardWriter> open(const std::string &dir);

  /// One Event of the record's scalars at its step; flushed. Non-finite
  /// values are written as they are (TensorBoard plots NaN as a gap).
  absl::Status write(const MetricsRecord &record, double wallTime);
  /// Flushes and closes the file; later writes fail.
  absl::Status close();

  const std::string &path() const { return path_; }

private:
  struct FileCloser {
    void operator()(std::FILE *file) const;
  };
  absl::Status append(const std::string &event);

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_TENSORBOARD_H
