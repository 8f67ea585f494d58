//===- SamePathTest.cpp - outputs that would overwrite inputs -------------===//
#include "moe/Runtime/IO/SamePath.h"

#include "TestFiles.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <filesystem>
#include <unistd.h>

using namespace moe::rt::io;
using moe::testing::ScratchDir;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

TEST(SamePath, ComparesFilesByIdentityNotSpelling) {
  ScratchDir dir;
  writeBytes(dir.file("w.bin"), "abc");
  writeBytes(dir.file("other.bin"), "abc");
  std::filesystem::create_directories(dir.file("sub"));
  ASSERT_EQ(::symlink(dir.file("w.bin").c_str(), dir.file("link").c_str()), 0);
  ASSERT_EQ(::link(dir.file("w.bin").c_str(), dir.file("hard").c_str()), 0);
  EXPECT_TRUE(isSameFile(dir.file("w.bin"), dir.file("sub/../w.bin")));
  EXPECT_TRUE(isSameFile(dir.file("w.bin"), dir.file("link")));
  EXPECT_TRUE(isSameFile(dir.file("w.bin"), dir.file("hard")));
  EXPECT_FALSE(isSameFile(dir.file("w.bin"), dir.file("other.bin")));
  // A file that does not exist is no file.
  EXPECT_FALSE(isSameFile(dir.file("missing"), dir.file("missing")));
}

TEST(SamePath, PlacesPathsThatDoNotExistYetByTheirAncestors) {
  ScratchDir dir;
  std::filesystem::create_directories(dir.file("w/sub"));
  ASSERT_EQ(::symlink(dir.file("w").c_str(), dir.file("wlink").c_str()), 0);
  EXPECT_TRUE(isInsideDirectory(dir.file("w"), dir.file("w")));
  EXPECT_TRUE(isInsideDirectory(dir.file("w/model.safetensors"), dir.file("w")));
  EXPECT_TRUE(isInsideDirectory(dir.file("w/new/deeper/x"), dir.file("w")));
  EXPECT_TRUE(isInsideDirectory(dir.file("wlink/x"), dir.file("w")));
  EXPECT_TRUE(isInsideDirectory(dir.file("w/x"), dir.file("wlink")));
  EXPECT_TRUE(isInsideDirectory(dir.file("w/sub/../x"), dir.file("w")));
  EXPECT_FALSE(isInsideDirectory(dir.file("w/../x"), dir.file("w")));
  EXPECT_FALSE(isInsideDirectory(dir.file("wx/y"), dir.file("w")));
  // Only a directory holds anything.
  writeBytes(dir.file("file"), "abc");
  EXPECT_FALSE(isInsideDirectory(dir.file("file/x"), dir.file("file")));
}

TEST(SamePath, SurvivesSymlinkLoops) {
  ScratchDir dir;
  ASSERT_EQ(::symlink(dir.file("b").c_str(), dir.file("a").c_str()), 0);
  ASSERT_EQ(::symlink(dir.file("a").c_str(), dir.file("b").c_str()), 0);
  EXPECT_FALSE(isSameFile(dir.file("a"), dir.file("b")));
  EXPECT_TRUE(isInsideDirectory(dir.file("a/x"), dir.path().string()));
}

TEST(SamePath, RefusesAnOutputOverAnInputNamingBothFlags) {
  ScratchDir dir;
  std::filesystem::create_directories(dir.file("w"));
  writeBytes(dir.file("w/model.safetensors"), "abc");
  writeBytes(dir.file("train.bin"), "abc");
  std::vector<FlagPath> inputs = {{"--load", dir.file("w")},
                                  {"--data", dir.file("train.bin")}};

  absl::Status inside = checkOutputsAreNotInputs(
      inputs, {{{"--out", dir.file("w/model.safetensors")}}});
  EXPECT_THAT(std::string(inside.message()),
              HasSubstr("--out '" + dir.file("w/model.safetensors") +
                        "' lies inside --load '" + dir.file("w") +
                        "', a directory this command reads"));

  absl::Status same = checkOutputsAreNotInputs(
      inputs, {{{"--metrics", dir.file("./train.bin")}}});
  EXPECT_THAT(std::string(same.message()),
              HasSubstr("--metrics '" + dir.file("./train.bin") +
                        "' is --data '" + dir.file("train.bin") +
                        "': an output must not overwrite an input"));

  absl::Status holds = checkOutputsAreNotInputs(
      inputs, {{{"--tensorboard", dir.path().string()}, true}});
  EXPECT_THAT(std::string(holds.message()), HasSubstr("an output directory must not hold "
                                          "an input"));
  // A file output in the directory that holds an input overwrites nothing.
  EXPECT_TRUE(checkOutputsAreNotInputs(
                  inputs, {{{"--metrics", dir.file("m.jsonl")}}})
                  .ok());
  EXPECT_TRUE(checkOutputsAreNotInputs(
                  inputs, {{{"--tensorboard", dir.file("tb")}, true},
                           {{"--out", ""}}})
                  .ok());
}

} // namespace
