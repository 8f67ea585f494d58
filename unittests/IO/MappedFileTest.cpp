//===- MappedFileTest.cpp - mapping files, refusing what is not one -------===//
#include "moe/Runtime/IO/File.h"

#include "TestFiles.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <future>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace moe::rt::io;
using moe::testing::ScratchDir;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

std::string messageOf(const absl::Status &status) {
  return std::string(status.message());
}

/// Opens `path` on another thread and waits at most 20 s, so that a
/// regression to a blocking open fails the test instead of hanging it.
absl::Status openWithin20s(const std::string &path,
                           absl::string_view description = {}) {
  auto opened = std::async(std::launch::async, [path, description] {
    return MappedFile::open(path, description).status();
  });
  if (opened.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "MappedFile::open blocked on " << path;
    // The blocked thread would keep the future's destructor waiting; give
    // the FIFO a writer so that open() returns.
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    opened.wait();
    if (fd >= 0)
      ::close(fd);
    return absl::UnknownError("blocked");
  }
  return opened.get();
}

TEST(MappedFile, MapsARegularFile) {
  ScratchDir dir;
  writeBytes(dir.file("x"), "hello");
  absl::StatusOr<MappedFile> file = MappedFile::open(dir.file("x"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char *>(file->data()),
                        file->size()),
            "hello");
  writeBytes(dir.file("empty"), "");
  absl::StatusOr<MappedFile> empty = MappedFile::open(dir.file("empty"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
}

TEST(MappedFile, RefusesAFifoWithoutBlocking) {
  ScratchDir dir;
  std::string path = dir.file("pipe");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  absl::Status status = openWithin20s(path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(messageOf(status),
            "cannot open '" + path + "': not a regular file (a fifo)");
  EXPECT_EQ(messageOf(openWithin20s(path, "artifact")),
            "cannot open artifact '" + path + "': not a regular file (a fifo)");
}

TEST(MappedFile, NamesWhatIsNotARegularFile) {
  ScratchDir dir;
  EXPECT_THAT(messageOf(MappedFile::open(dir.file("")).status()),
              HasSubstr("not a regular file (a directory)"));
  EXPECT_THAT(messageOf(MappedFile::open("/dev/null").status()),
              HasSubstr("'/dev/null': not a regular file (a character device)"));
  // A socket cannot even be opened; it is still named for what it is.
  std::string path = dir.file("sock");
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(address.sun_path));
  std::strcpy(address.sun_path, path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof address),
            0);
  EXPECT_THAT(messageOf(MappedFile::open(path).status()),
              HasSubstr("not a regular file (a socket)"));
  ::close(fd);
}

TEST(MappedFile, FollowsSymbolicLinksToWhatTheyName) {
  ScratchDir dir;
  writeBytes(dir.file("data"), "abc");
  ASSERT_EQ(::symlink(dir.file("data").c_str(), dir.file("link").c_str()), 0);
  EXPECT_TRUE(MappedFile::open(dir.file("link")).ok());
  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0600), 0);
  ASSERT_EQ(::symlink(dir.file("pipe").c_str(), dir.file("pipe-link").c_str()),
            0);
  EXPECT_THAT(messageOf(openWithin20s(dir.file("pipe-link"))),
              HasSubstr("not a regular file (a fifo)"));
}

TEST(MappedFile, ReportsAMissingFileAsNotFound) {
  ScratchDir dir;
  absl::Status status = MappedFile::open(dir.file("nope")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(messageOf(status), HasSubstr("cannot open '" + dir.file("nope") +
                                           "': No such file or directory"));
}

} // namespace
