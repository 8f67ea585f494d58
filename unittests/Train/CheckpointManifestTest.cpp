//===- CheckpointManifestTest.cpp - the checks of manifest.json -----------===//
//
// Manifests are written with encodeManifest, which seals them, so each
// case below gets past the checksum and reaches the check it is about. The
// JSON-level cases re-seal by the rule the manifest documents (XXH64 of the
// compact, key-sorted JSON without manifest_checksum), which pins that rule.
//
//===----------------------------------------------------------------------===//
#include "CheckpointManifest.h"

#include "TestFiles.h"

#include "moe/Runtime/IO/Checksum.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sys/stat.h>

using namespace moe::rt;
using namespace moe::rt::train;
using moe::testing::readBytes;
using moe::testing::ScratchDir;
using moe::testing::writeBytes;
using ::testing::HasSubstr;
using Json = nlohmann::json;

namespace {

/// Two buffers on fsdp=2 x tp=2: one split on both axes, one replicated.
CheckpointManifest validManifest() {
  CheckpointManifest manifest;
  manifest.model = "tiny";
  manifest.step = 3;
  manifest.dataSeed = 42;
  manifest.meshAxes = {"fsdp", "tp"};
  manifest.meshShape = {2, 2};
  manifest.buffers = {{"w", {8, 6}, {4, 3}, {{"fsdp"}, {"tp"}}},
                      {"norm", {6}, {6}, {}}};
  for (int64_t r = 0; r < 4; ++r)
    manifest.shards.push_back({r, shardFileName(r), 100 + static_cast<uint64_t>(r),
                               io::formatChecksum(r)});
  return manifest;
}

class ManifestTest : public ::testing::Test {
protected:
  std::string directory() const { return dir_.file("step-00000003"); }
  std::string manifestPath() const { return directory() + "/manifest.json"; }

  void SetUp() override { std::filesystem::create_directories(directory()); }

  absl::StatusOr<CheckpointManifest> roundTrip(const CheckpointManifest &m) {
    writeBytes(manifestPath(), encodeManifest(m));
    return readManifest(directory());
  }

  /// Expects `manifest` to be refused with exactly "checkpoint DIR: " +
  /// `message`.
  void expectRefused(const CheckpointManifest &manifest,
                     const std::string &message) {
    absl::StatusOr<CheckpointManifest> read = roundTrip(manifest);
    ASSERT_FALSE(read.ok()) << "accepted: " << message;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(read.status().message()),
              "checkpoint " + directory() + ": " + message);
  }

  /// The saved manifest as JSON, edited by `edit`, re-sealed and written.
  template <typename Edit> absl::Status editJson(Edit edit, bool reseal = true) {
    writeBytes(manifestPath(), encodeManifest(validManifest()));
    Json json = Json::parse(readBytes(manifestPath()));
    edit(json);
    if (reseal) {
      json.erase("manifest_checksum");
      json["manifest_checksum"] =
          io::formatChecksum(io::contentChecksum(json.dump()));
    }
    writeBytes(manifestPath(), json.dump(2));
    return readManifest(directory()).status();
  }

  ScratchDir dir_;
};

TEST_F(ManifestTest, RoundTrips) {
  absl::StatusOr<CheckpointManifest> read = roundTrip(validManifest());
  ASSERT_TRUE(read.ok()) << read.status();
  CheckpointManifest expected = validManifest();
  EXPECT_EQ(read->model, "tiny");
  EXPECT_EQ(read->step, 3);
  EXPECT_EQ(read->dataSeed, 42u);
  EXPECT_EQ(read->meshAxes, expected.meshAxes);
  EXPECT_EQ(read->meshShape, expected.meshShape);
  ASSERT_EQ(read->buffers.size(), 2u);
  EXPECT_EQ(read->buffers[0].globalShape, (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(read->buffers[0].split, expected.buffers[0].split);
  ASSERT_EQ(read->shards.size(), 4u);
  EXPECT_EQ(read->shards[3].file, "rank-00003.safetensors");
  EXPECT_EQ(read->shards[3].bytes, 103u);
  EXPECT_EQ(read->shards[3].checksum, "xxh64:0000000000000003");
}

TEST_F(ManifestTest, TheChecksumIsOfTheCanonicalJson) {
  writeBytes(manifestPath(), encodeManifest(validManifest()));
  Json json = Json::parse(readBytes(manifestPath()));
  std::string recorded = json["manifest_checksum"];
  json.erase("manifest_checksum");
  EXPECT_EQ(recorded, io::formatChecksum(io::contentChecksum(json.dump())));
  // Whitespace is not content.
  json["manifest_checksum"] = recorded;
  writeBytes(manifestPath(), json.dump());
  EXPECT_TRUE(readManifest(directory()).ok());
}

TEST_F(ManifestTest, AnEditWithoutResealingFailsTheChecksum) {
  absl::Status status =
      editJson([](Json &json) { json["step"] = 6; }, /*reseal=*/false);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("manifest.json does not match its manifest_checksum "
                        "(edited or damaged): the field says xxh64:"));
  status = editJson([](Json &json) { json.erase("manifest_checksum"); },
                    /*reseal=*/false);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("manifest.json has no field 'manifest_checksum'"));
}

TEST_F(ManifestTest, TheStepIsTheDirectorys) {
  CheckpointManifest manifest = validManifest();
  manifest.step = 6;
  expectRefused(manifest, "manifest field 'step' is 6 but the directory is "
                          "'step-00000003' (expected 'step-00000006')");
  // A symbolic link ("latest") is followed to the directory it names.
  std::string link = dir_.file("latest");
  std::filesystem::create_directory_symlink(directory(), link);
  writeBytes(manifestPath(), encodeManifest(validManifest()));
  EXPECT_TRUE(readManifest(link).ok());
  EXPECT_TRUE(readManifest(directory() + "/").ok());
}

TEST_F(ManifestTest, TheMeshMustBeValid) {
  CheckpointManifest manifest = validManifest();
  manifest.meshShape = {2, 0};
  expectRefused(manifest, "manifest field 'mesh' is not a valid mesh: mesh "
                          "axis 'tp' has size 0; sizes must be positive");
  manifest = validManifest();
  manifest.meshAxes = {"fsdp", "fsdp"};
  expectRefused(manifest, "manifest field 'mesh' is not a valid mesh: mesh "
                          "axis 'fsdp' appears twice");
}

TEST_F(ManifestTest, GlobalShapesAreShapesSplitOnTheMesh) {
  CheckpointManifest manifest = validManifest();
  manifest.buffers[0].globalShape = {4, 6};
  expectRefused(manifest,
                "manifest field 'buffers[0].global_shape' of buffers[0] ('w') "
                "is [4, 6], but shape [4, 3] split [[fsdp], [tp]] on the "
                "saving mesh fsdp=2 x tp=2 is [8, 6]");
  manifest = validManifest();
  manifest.meshShape = {4, 2};
  manifest.shards.clear();
  expectRefused(manifest,
                "manifest field 'buffers[0].global_shape' of buffers[0] ('w') "
                "is [8, 6], but shape [4, 3] split [[fsdp], [tp]] on the "
                "saving mesh fsdp=4 x tp=2 is [16, 6]");
  manifest = validManifest();
  manifest.buffers[1].globalShape = {6, 1};
  expectRefused(manifest, "manifest field 'buffers[1].global_shape' of "
                          "buffers[1] ('norm') is [6, 1], but shape [6] split "
                          "[] on the saving mesh fsdp=2 x tp=2 is [6]");
}

TEST_F(ManifestTest, SplitsNameTheMeshsAxesOnce) {
  CheckpointManifest manifest = validManifest();
  manifest.buffers[0].split = {{"dp"}, {}};
  expectRefused(manifest, "manifest field 'buffers[0].split' of buffers[0] "
                          "('w') names axis 'dp', which is not an axis of the "
                          "saving mesh fsdp=2 x tp=2");
  manifest.buffers[0].split = {{"fsdp"}, {"fsdp"}};
  expectRefused(manifest, "manifest field 'buffers[0].split' of buffers[0] "
                          "('w') uses axis 'fsdp' twice");
  manifest.buffers[0].split = {{"fsdp"}};
  expectRefused(manifest, "manifest field 'buffers[0].split' of buffers[0] "
                          "('w') is [[fsdp]]: 1 entries for shape [4, 3], "
                          "expected one per dimension");
  manifest = validManifest();
  manifest.buffers[1].name = "w";
  expectRefused(manifest, "manifest field 'buffers[1].name' is 'w', the name "
                          "of buffers[0] too");
}

TEST_F(ManifestTest, ShardsAreTheMeshsRanksInOrder) {
  CheckpointManifest manifest = validManifest();
  manifest.shards.pop_back();
  expectRefused(manifest, "manifest field 'shards' lists 3 shards, the "
                          "saving mesh fsdp=2 x tp=2 has 4 ranks");
  manifest = validManifest();
  std::swap(manifest.shards[1], manifest.shards[2]);
  expectRefused(manifest, "manifest field 'shards[1].rank' is 2, expected 1 "
                          "(the shards are ranks 0..n-1 of the saving mesh, "
                          "in order)");
  manifest = validManifest();
  manifest.shards[2].file = "../rank-00002.safetensors";
  expectRefused(manifest, "manifest field 'shards[2].file' is "
                          "'../rank-00002.safetensors', expected "
                          "'rank-00002.safetensors' (rank 2's shard)");
}

TEST_F(ManifestTest, FieldsAreTypedAndKnown) {
  auto message = [](const absl::Status &status) {
    return std::string(status.message());
  };
  EXPECT_THAT(message(editJson([](Json &json) { json["step"] = "3"; })),
              HasSubstr("manifest field 'step' is \"3\", expected an integer"));
  EXPECT_THAT(message(editJson([](Json &json) { json["step"] = -1; })),
              HasSubstr("manifest field 'step' is -1, expected at least 0"));
  EXPECT_THAT(
      message(editJson([](Json &json) { json["buffers"][0]["shape"][1] = 2.5; })),
      HasSubstr("manifest field 'buffers[0].shape[1]' is 2.5, expected an "
                "integer"));
  EXPECT_THAT(message(editJson([](Json &json) { json["mesh"]["axes"] = "fsdp"; })),
              HasSubstr("manifest field 'mesh.axes' is \"fsdp\", expected an "
                        "array of strings"));
  EXPECT_THAT(
      message(editJson([](Json &json) { json["shards"][0]["bytes"] = -4; })),
      HasSubstr("manifest field 'shards[0].bytes' is -4, expected an unsigned "
                "integer"));
  EXPECT_THAT(message(editJson([](Json &json) { json["frobnicate"] = 3; })),
              HasSubstr("manifest.json has an unknown field 'frobnicate' "
                        "(known: buffers, data_seed, format, mesh, model, "
                        "shards, step, version)"));
  EXPECT_THAT(
      message(editJson([](Json &json) { json["shards"][1]["owner"] = "me"; })),
      HasSubstr("manifest.json has an unknown field 'shards[1].owner' (known: "
                "bytes, checksum, file, rank)"));
  EXPECT_THAT(message(editJson([](Json &json) { json.erase("data_seed"); })),
              HasSubstr("manifest.json has no field 'data_seed'"));
  EXPECT_THAT(
      message(editJson([](Json &json) { json["buffers"][1].erase("split"); })),
      HasSubstr("manifest field 'buffers[1]' has no field 'split'"));
  EXPECT_THAT(message(editJson([](Json &json) { json["version"] = 1; })),
              HasSubstr("manifest field 'version' is 1, this moe-run reads "
                        "version 2"));
  EXPECT_THAT(message(editJson([](Json &json) { json["format"] = "other"; })),
              HasSubstr("manifest.json is not a moe checkpoint manifest"));
}

TEST_F(ManifestTest, RefusesWhatIsNotAManifest) {
  writeBytes(manifestPath(), "{\"step\": ");
  EXPECT_THAT(std::string(readManifest(directory()).status().message()),
              HasSubstr("manifest.json is not valid json"));
  writeBytes(manifestPath(), "[1, 2]");
  EXPECT_THAT(std::string(readManifest(directory()).status().message()),
              HasSubstr("manifest.json is not a json object"));
  std::filesystem::remove(manifestPath());
  EXPECT_THAT(std::string(readManifest(directory()).status().message()),
              HasSubstr("no manifest.json (an incomplete checkpoint?)"));
  // A FIFO is refused without waiting for a writer.
  ASSERT_EQ(::mkfifo(manifestPath().c_str(), 0600), 0);
  EXPECT_THAT(std::string(readManifest(directory()).status().message()),
              HasSubstr("cannot open manifest '" + manifestPath() +
                        "': not a regular file (a fifo)"));
}

} // namespace
