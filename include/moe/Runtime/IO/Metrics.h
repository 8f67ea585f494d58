//===- Metrics.h - JSONL training metrics and progress lines ----*- C++ -*-===//
//
// MetricsWriter appends one JSON object per line and flushes after each, so
// a crashed run keeps every step it logged and `tail -f` sees lines as they
// come. formatProgressLine() renders the same record for a terminal:
//
//   step 12/300 | loss 3.4512 | grad_norm 1.234 | lr 3.00e-03 | 41.2k tok/s
//     | 1.23 GFLOP/s | 12.3 s
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_METRICS_H
#define MOE_RUNTIME_IO_METRICS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moe::rt::io {

/// One step's metrics. Absent optional fields are left out of the JSON
/// line and of the progress line.
struct MetricsRecord {
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> gradNorm;
  std::optional<double> lr;
  std::optional<double> tokensPerS;
  std::optional<double> flopsPerS;
  std::optional<double> elapsedS;
  /// Further numeric fields, written after the standard ones in this order
  /// (e.g. {"aux_loss", 0.01}, {"ce_loss", 3.2}).
  std::vector<std::pair<std::string, double>> extra;
  /// Fields for the metrics file only, after the extras: per-layer values
  /// (one MoE layer's load, "load_cv.7") that would crowd the progress line.
  std::vector<std::pair<std::string, double>> detail;
};

/// The JSON object for `record` on one line (no newline). Keys: step, loss,
/// grad_norm, lr, tokens_per_s, flops_per_s, elapsed_s, then the extras and
/// the details.
/// Non-finite values are written as null (JSON has no NaN or Infinity).
/// Fails if an extra field is empty, repeated, or names a standard field.
absl::StatusOr<std::string> formatMetricsJson(const MetricsRecord &record);

/// The human progress line; `totalSteps` <= 0 leaves out the "/total".
std::string formatProgressLine(const MetricsRecord &record,
                               int64_t totalSteps = 0);

/// "41.2k", "3.10M", "950": a value with a k/M/G/T/P suffix and three
/// significant digits.
std::string formatSiValue(double value);

/// Appends MetricsRecords to a JSONL file. Move-only.
class MetricsWriter {
public:
  /// Opens `path`, truncating it unless `append` (for resumed runs).
  static absl::StatusOr<MetricsWriter> open(const std::string &path,
                                            bool append = false);

  /// Writes one line and flushes it; errors name the file.
  absl::Status write(const MetricsRecord &record);
  /// Flushes and closes the file; later writes fail.
  absl::Status close();

  const std::string &path() const { return path_; }

private:
  struct FileCloser {
    void operator()(std::FILE *file) const;
  };

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_METRICS_H
