//===- AtomicFile.cpp - write to a temporary file, then rename ------------===//
//
// The temporary file lives in the target's directory (rename() is only
// atomic within one file system) and has a name unique to the process and
// the call, so concurrent writers of different files never collide.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/File.h"

#include "absl/strings/str_cat.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <utility>

namespace moe::rt::io {

namespace {

absl::Status writeError(const std::string &what, const std::string &path,
                        int err) {
  return absl::UnavailableError(
      absl::StrCat("cannot ", what, " '", path, "': ", std::strerror(err)));
}

std::string temporaryPathFor(const std::string &path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", static_cast<long>(::getpid()), ".",
                      counter.fetch_add(1));
}

} // namespace

absl::StatusOr<AtomicFile> AtomicFile::create(const std::string &path) {
  if (path.empty())
    return absl::InvalidArgumentError("cannot write a file with an empty path");
  AtomicFile file;
  file.path_ = path;
  file.tempPath_ = temporaryPathFor(path);
  file.fd_ = ::open(file.tempPath_.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (file.fd_ < 0)
    return writeError("create", path, errno);
  return file;
}

AtomicFile::AtomicFile(AtomicFile &&other) noexcept
    : path_(std::move(other.path_)), tempPath_(std::move(other.tempPath_)),
      fd_(other.fd_) {
  other.fd_ = -1;
}

AtomicFile &AtomicFile::operator=(AtomicFile &&other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    tempPath_ = std::move(other.tempPath_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() {
  if (fd_ < 0)
    return;
  ::close(fd_);
  ::unlink(tempPath_.c_str());
  fd_ = -1;
}

absl::Status AtomicFile::write(const void *data, size_t size) {
  if (fd_ < 0)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write '", path_, "': file is not open"));
  const char *bytes = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, bytes, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return writeError("write", path_, errno);
    }
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::commit() {
  if (fd_ < 0)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot commit '", path_, "': file is not open"));
  if (::fsync(fd_) != 0) {
    int err = errno;
    abandon();
    return writeError("sync", path_, err);
  }
  if (::close(fd_) != 0) {
    int err = errno;
    fd_ = -1;
    ::unlink(tempPath_.c_str());
    return writeError("close", path_, err);
  }
  fd_ = -1;
  if (std::rename(tempPath_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tempPath_.c_str());
    return writeError("rename a temporary file to", path_, err);
  }
  return absl::OkStatus();
}

} // namespace moe::rt::io
