//===- CheckpointTest.cpp - save, load and refuse checkpoints -------------===//
#include "moe/Runtime/Train/Checkpoint.h"
#include "moe/Runtime/Train/AsyncCheckpoint.h"

#include "CheckpointManifest.h"
#include "TestFiles.h"
#include "TestProgram.h"

#include "moe/Runtime/IO/Checksum.h"
#include "moe/Runtime/IO/Safetensors.h"
#include "moe/Runtime/Train/Weights.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

using namespace moe::rt;
using namespace moe::rt::train;
using moe::testing::readBytes;
using moe::testing::ScratchDir;
using moe::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

std::unique_ptr<Executor> makeExecutor(uint64_t seed) {
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(moe::rt::testing::makeMoeProgram());
  EXPECT_TRUE(executor.ok()) << executor.status();
  (*executor)->initialize(seed);
  return std::move(*executor);
}

class CheckpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    source_ = makeExecutor(1);
    absl::StatusOr<std::unique_ptr<comm::Group>> group =
        source_->createGroup(source_->program().meshAxes);
    ASSERT_TRUE(group.ok()) << group.status();
    ASSERT_TRUE(
        saveCheckpoint(*source_, **group, dir_.file("ckpt"), 5, 9).ok());
  }

  std::string checkpoint() const { return dir_.file("ckpt/step-00000005"); }

  /// Replaces element `index` of tensor `name` in the shard by `value` and
  /// records the shard's new size and checksum in the manifest, so that
  /// only the values are wrong.
  void poisonShard(const std::string &name, int64_t index, float value) {
    std::string shard = checkpoint() + "/" + shardFileName(0);
    absl::StatusOr<io::SafetensorsFile> file = io::readSafetensors(shard);
    ASSERT_TRUE(file.ok()) << file.status();
    std::vector<io::TensorView> views;
    for (io::TensorData &tensor : file->tensors) {
      if (tensor.name == name)
        tensor.f32[index] = value;
      views.push_back({tensor.name, "F32", tensor.shape, tensor.f32.data()});
    }
    ASSERT_TRUE(io::writeSafetensors(shard, views).ok());
    absl::StatusOr<CheckpointManifest> manifest = readManifest(checkpoint());
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    std::string bytes = readBytes(shard);
    manifest->shards[0].bytes = bytes.size();
    manifest->shards[0].checksum =
        io::formatChecksum(io::contentChecksum(bytes));
    writeBytes(checkpoint() + "/manifest.json", encodeManifest(*manifest));
  }

  std::string loadError() {
    auto target = makeExecutor(2);
    return std::string(loadCheckpoint(*target, checkpoint()).status().message());
  }

  ScratchDir dir_;
  std::unique_ptr<Executor> source_;
};

TEST_F(CheckpointTest, LoadRestoresEveryBufferAndTheStep) {
  auto target = makeExecutor(2);
  absl::StatusOr<std::string> found = findCheckpoint(dir_.file("ckpt"));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, checkpoint());
  absl::StatusOr<CheckpointState> state = loadCheckpoint(*target, *found);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->steps, 5);
  EXPECT_EQ(state->dataSeed, 9u);
  for (const std::vector<uint32_t> *set :
       {&source_->parameters(), &source_->optimizerStates()})
    for (uint32_t b : *set) {
      int64_t n = source_->program().buffers[b].numElements();
      EXPECT_TRUE(std::equal(source_->data(b), source_->data(b) + n,
                             target->data(b)))
          << source_->program().buffers[b].name;
    }
}

TEST_F(CheckpointTest, RefusesAShardHoldingNaNOrInfinity) {
  const std::string name = source_->program().buffers[source_->parameters()[0]].name;
  poisonShard(name, 5, std::nanf(""));
  EXPECT_EQ(loadError(), "checkpoint " + checkpoint() + ": shard " +
                             checkpoint() + "/rank-00000.safetensors: tensor '" +
                             name + "' holds nan at element [0, 5] (flat index 5)");
  poisonShard(name, 5, 1.0f);
  EXPECT_EQ(loadError(), "");
  poisonShard(name, 5, -INFINITY);
  EXPECT_THAT(loadError(), HasSubstr("holds -inf at element [0, 5]"));
}

TEST_F(CheckpointTest, RefusesAnotherModelsCheckpoint) {
  absl::StatusOr<CheckpointManifest> manifest = readManifest(checkpoint());
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  manifest->model = "mixtral";
  writeBytes(checkpoint() + "/manifest.json", encodeManifest(*manifest));
  EXPECT_EQ(loadError(), "checkpoint " + checkpoint() +
                             ": manifest field 'model' is 'mixtral', the "
                             "artifact's model is 'tiny-moe'");
}

TEST_F(CheckpointTest, ShardsHoldExactlyTheManifestsBlocks) {
  absl::StatusOr<CheckpointManifest> saved = readManifest(checkpoint());
  ASSERT_TRUE(saved.ok()) << saved.status();
  // A buffer the manifest lists twice over (renamed): the model lacks it.
  CheckpointManifest extra = *saved;
  extra.buffers.push_back(extra.buffers[0]);
  extra.buffers.back().name = "model.layers.7.mlp.gate_proj.weight";
  writeBytes(checkpoint() + "/manifest.json", encodeManifest(extra));
  EXPECT_THAT(loadError(),
              HasSubstr("it has a tensor 'model.layers.7.mlp.gate_proj.weight' "
                        "that the model does not have"));
  // A buffer the manifest leaves out, though its shard holds it.
  CheckpointManifest fewer = *saved;
  std::string dropped = fewer.buffers.back().name;
  fewer.buffers.pop_back();
  writeBytes(checkpoint() + "/manifest.json", encodeManifest(fewer));
  EXPECT_THAT(loadError(), HasSubstr("has a tensor '" + dropped +
                                     "' that the manifest does not list"));
  // A block shape the shard does not have.
  CheckpointManifest reshaped = *saved;
  ManifestBuffer &buffer = reshaped.buffers[0];
  std::swap(buffer.shape[0], buffer.shape[1]);
  buffer.globalShape = buffer.shape;
  writeBytes(checkpoint() + "/manifest.json", encodeManifest(reshaped));
  EXPECT_THAT(loadError(), HasSubstr("tensor '" + buffer.name + "' is F32 ["));
  EXPECT_THAT(loadError(), HasSubstr("], the manifest says F32 ["));
}

// --checkpoint-async: the checkpoint holds the state when it was started,
// though the store changes while it is written, and becomes complete only
// when committed.
TEST(AsyncCheckpointTest, WritesTheStateAsStarted) {
  ScratchDir dir;
  auto source = makeExecutor(1);
  auto started = makeExecutor(1);
  absl::StatusOr<std::unique_ptr<comm::Group>> group =
      source->createGroup(source->program().meshAxes);
  ASSERT_TRUE(group.ok()) << group.status();
  AsyncCheckpointWriter writer;
  EXPECT_FALSE(writer.pending());
  ASSERT_TRUE(writer.start(*source, **group, dir.file("ckpt"), 3, 4).ok());
  EXPECT_TRUE(writer.pending());
  // What the next steps would do to the weights.
  for (uint32_t b : source->parameters())
    std::fill_n(source->data(b), source->program().buffers[b].numElements(),
                7.0f);
  absl::StatusOr<bool> finished = writer.finish(**group);
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_TRUE(*finished);
  EXPECT_FALSE(writer.pending());
  EXPECT_THAT(writer.lastCommitted(), ::testing::EndsWith("step-00000003"));
  absl::StatusOr<bool> again = writer.finish(**group);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);

  auto target = makeExecutor(2);
  absl::StatusOr<CheckpointState> state =
      loadCheckpoint(*target, dir.file("ckpt/step-00000003"));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->steps, 3);
  for (uint32_t b : started->parameters()) {
    int64_t n = started->program().buffers[b].numElements();
    EXPECT_TRUE(
        std::equal(started->data(b), started->data(b) + n, target->data(b)))
        << started->program().buffers[b].name;
  }
}

// --checkpoint-keep: the newest complete checkpoints stay, the older go;
// an unfinished one is left alone, and the newest always stays.
TEST(PruneCheckpointsTest, KeepsTheNewestCompleteOnes) {
  ScratchDir dir;
  auto make = [&](const std::string &name, bool complete) {
    std::filesystem::create_directories(dir.path() / name);
    if (complete)
      std::ofstream(dir.path() / name / "manifest.json") << "{}";
  };
  for (const char *name :
       {"step-00000002", "step-00000004", "step-00000006", "step-00000008"})
    make(name, true);
  make("step-00000010.partial", false);
  ASSERT_TRUE(pruneCheckpoints(dir.path().string(), 2).ok());
  std::vector<std::string> left;
  for (const auto &entry : std::filesystem::directory_iterator(dir.path()))
    left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_THAT(left, ::testing::ElementsAre("step-00000006", "step-00000008",
                                           "step-00000010.partial"));
  absl::StatusOr<std::string> newest = findCheckpoint(dir.path().string());
  ASSERT_TRUE(newest.ok());
  EXPECT_THAT(*newest, ::testing::EndsWith("step-00000008"));
  absl::Status none = pruneCheckpoints(dir.path().string(), 0);
  EXPECT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.message()),
              ::testing::HasSubstr("at least the newest must stay"));
}

} // namespace
