//===- MetricsWriter.cpp - append metrics to a JSONL file -----------------===//
#include "moe/Runtime/IO/Metrics.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>

namespace moe::rt::io {

void MetricsWriter::FileCloser::operator()(std::FILE *file) const {
  std::fclose(file);
}

absl::StatusOr<MetricsWriter> MetricsWriter::open(const std::string &path,
                                                  bool append) {
  std::FILE *file = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (!file)
    return absl::UnavailableError(absl::StrCat(
        "cannot open metrics file '", path, "': ", std::strerror(errno)));
  MetricsWriter writer;
  writer.path_ = path;
  writer.file_.reset(file);
  return writer;
}

absl::Status MetricsWriter::write(const MetricsRecord &record) {
  if (!file_)
    return absl::FailedPreconditionError(
        absl::StrCat("metrics file '", path_, "' is not open"));
  absl::StatusOr<std::string> line = formatMetricsJson(record);
  if (!line.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("metrics file '", path_, "': ", line.status().message()));
  line->push_back('\n');
  if (std::fwrite(line->data(), 1, line->size(), file_.get()) != line->size() ||
      std::fflush(file_.get()) != 0)
    return absl::UnavailableError(absl::StrCat(
        "cannot write metrics file '", path_, "': ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status MetricsWriter::close() {
  if (!file_)
    return absl::OkStatus();
  std::FILE *file = file_.release();
  if (std::fclose(file) != 0)
    return absl::UnavailableError(absl::StrCat(
        "cannot close metrics file '", path_, "': ", std::strerror(errno)));
  return absl::OkStatus();
}

} // namespace moe::rt::io
