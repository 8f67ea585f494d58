//===- MappedFile.cpp - whole files mapped read-only ----------------------===//
//
// Maps a regular file with mmap(PROT_READ, MAP_PRIVATE). Zero-length files
// are valid and map to no bytes (mmap rejects a zero length).
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

absl::Status errnoError(const std::string &what, const std::string &path,
                        int err) {
  std::string message =
      absl::StrCat("cannot ", what, " '", path, "': ", std::strerror(err));
  if (err == ENOENT)
    return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

} // namespace

absl::StatusOr<MappedFile> MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errnoError("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoError("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open '", path, "': not a regular file"));
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<uint64_t>(st.st_size);
  if (file.size_ > 0) {
    void *addr = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return errnoError("map", path, err);
    }
    file.data_ = static_cast<const uint8_t *>(addr);
  }
  ::close(fd);
  return file;
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

bool isRegularFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

} // namespace moe::rt::io
