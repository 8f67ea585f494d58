//===- File.h - read-only mapped files and atomic writes --------*- C++ -*-===//
//
// Two file primitives shared by the runtime's readers and writers:
// MappedFile maps a whole file read-only (an empty file maps to no bytes),
// AtomicFile writes to a temporary file next to the target and renames it
// into place on commit(), so a reader never sees a half-written file.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_FILE_H
#define MOE_RUNTIME_IO_FILE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace moe::rt::io {

/// A whole file mapped read-only. Move-only; unmaps on destruction.
class MappedFile {
public:
  /// Maps `path`. Fails (naming the path, after `description` if given:
  /// "cannot open artifact 'p': ...") if it is missing, unreadable or not a
  /// regular file ("cannot open 'p': not a regular file (a fifo)"), without
  /// blocking: every reader of the runtime opens its inputs here, so a FIFO
  /// with no writer is refused instead of hanging in open().
  static absl::StatusOr<MappedFile> open(const std::string &path,
                                         absl::string_view description = {});

  MappedFile() = default;
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile();

  const uint8_t *data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string &path() const { return path_; }

private:
  void reset();

  std::string path_;
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
};

/// True if `path` names an existing regular file (symlinks followed).
bool isRegularFile(const std::string &path);

/// OK if `path` is a regular file (symlinks followed), NotFound if nothing
/// is there, else an error saying what it is, worded as MappedFile::open
/// words it ("cannot open checkpoint 'p': not a regular file (a fifo)", a
/// symlink loop). Looks without opening, so a FIFO never blocks it.
absl::Status checkRegularFile(const std::string &path,
                              absl::string_view description = {});

/// Writes a file atomically: bytes go to a temporary file in the target's
/// directory; commit() flushes it and renames it over `path`. Destroying an
/// uncommitted AtomicFile removes the temporary file. Move-only.
class AtomicFile {
public:
  static absl::StatusOr<AtomicFile> create(const std::string &path);

  AtomicFile() = default;
  AtomicFile(AtomicFile &&other) noexcept;
  AtomicFile &operator=(AtomicFile &&other) noexcept;
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;
  ~AtomicFile();

  /// Appends `size` bytes; errors name the target path.
  absl::Status write(const void *data, size_t size);
  absl::Status write(const std::string &bytes) {
    return write(bytes.data(), bytes.size());
  }
  /// Flushes, syncs and renames the temporary file to the target path.
  absl::Status commit();

  const std::string &path() const { return path_; }

private:
  void abandon();

  std::string path_;
  std::string tempPath_;
  int fd_ = -1;
};

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_FILE_H
