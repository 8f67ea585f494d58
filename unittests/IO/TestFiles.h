//===- TestFiles.h - scratch files for the Data and IO tests ----*- C++ -*-===//
#ifndef MOE_UNITTESTS_IO_TESTFILES_H
#define MOE_UNITTESTS_IO_TESTFILES_H

#include "gtest/gtest.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

namespace moe::testing {

/// A fresh directory for the current test, removed when it goes away.
class ScratchDir {
public:
  ScratchDir() {
    const ::testing::TestInfo *info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            (std::string("moe_") + info->test_suite_name() + "_" +
             info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }

  /// `name` inside the directory.
  std::string file(const std::string &name) const {
    return (path_ / name).string();
  }
  const std::filesystem::path &path() const { return path_; }

private:
  std::filesystem::path path_;
};

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Appends `value` in little-endian byte order.
template <typename T> void appendLE(std::string &out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(
        static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

} // namespace moe::testing

#endif // MOE_UNITTESTS_IO_TESTFILES_H
