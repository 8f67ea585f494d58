//===- MappedFile.cpp - whole files mapped read-only ----------------------===//
//
// Maps a regular file with mmap(PROT_READ, MAP_PRIVATE). Zero-length files
// are valid and map to no bytes (mmap rejects a zero length).
//
// The file is opened with O_NONBLOCK and its type checked with fstat before
// anything else: a plain open() of a FIFO with no writer blocks forever, and
// a device or FIFO has no size to map. O_NONBLOCK changes nothing for the
// regular file that is then mapped (it only affects read() and write()).
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/File.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace moe::rt::io {

namespace {

/// "artifact 'p'", or "'p'" without a description.
std::string named(absl::string_view description, const std::string &path) {
  return description.empty() ? absl::StrCat("'", path, "'")
                             : absl::StrCat(description, " '", path, "'");
}

absl::Status errnoError(const std::string &what, const std::string &file,
                        int err) {
  std::string message =
      absl::StrCat("cannot ", what, " ", file, ": ", std::strerror(err));
  switch (err) {
  case ENOENT:
  case ENOTDIR:
    return absl::NotFoundError(message);
  case EACCES:
  case EPERM:
    return absl::PermissionDeniedError(message);
  default:
    return absl::UnavailableError(message);
  }
}

/// "a fifo", "a directory", ...: what a file of `mode` is, for messages.
const char *fileKind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a fifo";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  return "not a file";
}

absl::Status notRegular(const std::string &file, mode_t mode) {
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot open ", file, ": not a regular file (", fileKind(mode), ")"));
}

} // namespace

absl::StatusOr<MappedFile> MappedFile::open(const std::string &path,
                                            absl::string_view description) {
  std::string file = named(description, path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    // A socket cannot be opened at all (ENXIO); name what it is instead.
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return notRegular(file, st.st_mode);
    return errnoError("open", file, err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoError("stat", file, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return notRegular(file, st.st_mode);
  }
  MappedFile mapped;
  mapped.path_ = path;
  mapped.size_ = static_cast<uint64_t>(st.st_size);
  if (mapped.size_ > 0) {
    void *addr = ::mmap(nullptr, mapped.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return errnoError("map", file, err);
    }
    mapped.data_ = static_cast<const uint8_t *>(addr);
  }
  ::close(fd);
  return mapped;
}

MappedFile::MappedFile(MappedFile &&other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

absl::Status checkRegularFile(const std::string &path,
                              absl::string_view description) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errnoError("open", named(description, path), errno);
  if (!S_ISREG(st.st_mode))
    return notRegular(named(description, path), st.st_mode);
  return absl::OkStatus();
}

bool isRegularFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

} // namespace moe::rt::io
