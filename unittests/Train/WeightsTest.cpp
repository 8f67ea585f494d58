//===- WeightsTest.cpp - safetensors export and import of weights ---------===//
#include "moe/Runtime/Train/Weights.h"

#include "TestFiles.h"
#include "TestProgram.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace moe::rt;
using moe::testing::ScratchDir;
using ::testing::HasSubstr;

namespace {

std::unique_ptr<Executor> makeMoeExecutor(uint64_t seed) {
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(moe::rt::testing::makeMoeProgram());
  EXPECT_TRUE(executor.ok()) << executor.status();
  (*executor)->initialize(seed);
  return std::move(*executor);
}

std::vector<float> copyOf(const Executor &executor, uint32_t buffer) {
  const float *data = executor.data(buffer);
  return std::vector<float>(
      data, data + executor.program().buffers[buffer].numElements());
}

TEST(WeightsTest, StackedExpertsExportOneTensorPerExpert) {
  std::vector<float> stacked(3 * 2 * 4);
  for (size_t i = 0; i < stacked.size(); ++i)
    stacked[i] = static_cast<float>(i);
  std::vector<io::TensorView> views;
  train::appendExportViews("layers.0.experts.{e}.w1.weight", {3, 2, 4},
                           stacked.data(), views);
  train::appendExportViews("norm.weight", {4}, stacked.data(), views);
  ASSERT_EQ(views.size(), 4u);
  EXPECT_EQ(views[0].name, "layers.0.experts.0.w1.weight");
  EXPECT_EQ(views[2].name, "layers.0.experts.2.w1.weight");
  EXPECT_EQ(views[2].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(static_cast<const float *>(views[2].data), stacked.data() + 16);
  EXPECT_EQ(views[3].name, "norm.weight");
}

TEST(WeightsTest, SaveThenLoadRestoresEveryParameterAndMoment) {
  ScratchDir dir;
  auto source = makeMoeExecutor(1);
  // Non-zero moments, so that the optimizer-state round trip means something.
  for (uint32_t state : source->optimizerStates()) {
    float *data = source->data(state);
    for (int64_t i = 0; i < source->program().buffers[state].numElements(); ++i)
      data[i] = 0.25f * static_cast<float>(i % 7);
  }
  ASSERT_TRUE(train::saveWeights(*source, dir.file("w.safetensors"),
                                 train::WeightSet::Both)
                  .ok());
  auto target = makeMoeExecutor(2);
  ASSERT_TRUE(train::loadWeights(*target, dir.file("w.safetensors"),
                                 train::WeightSet::Both)
                  .ok());
  for (uint32_t buffer : source->parameters())
    EXPECT_EQ(copyOf(*source, buffer), copyOf(*target, buffer))
        << source->program().buffers[buffer].name;
  for (uint32_t buffer : source->optimizerStates())
    EXPECT_EQ(copyOf(*source, buffer), copyOf(*target, buffer))
        << source->program().buffers[buffer].name;
}

TEST(WeightsTest, ParametersOnlyLoadIgnoresSavedMoments) {
  ScratchDir dir;
  auto source = makeMoeExecutor(1);
  ASSERT_TRUE(train::saveWeights(*source, dir.file("w.safetensors"),
                                 train::WeightSet::Both)
                  .ok());
  auto target = makeMoeExecutor(2);
  EXPECT_TRUE(train::loadWeights(*target, dir.file("w.safetensors"),
                                 train::WeightSet::Parameters)
                  .ok());
}

TEST(WeightsTest, ErrorsNameTheTensorAndTheFile) {
  ScratchDir dir;
  auto executor = makeMoeExecutor(1);
  std::string path = dir.file("w.safetensors");
  std::vector<io::TensorView> views =
      train::exportViews(*executor, train::WeightSet::Parameters);

  // A missing tensor.
  std::vector<io::TensorView> missing(views.begin() + 1, views.end());
  ASSERT_TRUE(io::writeSafetensors(path, missing).ok());
  absl::Status status =
      train::loadWeights(*executor, path, train::WeightSet::Parameters);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor '" + views[0].name + "' is missing"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));

  // A shape mismatch.
  std::vector<io::TensorView> reshaped = views;
  reshaped[0].shape = {reshaped[0].shape[1], reshaped[0].shape[0]};
  ASSERT_TRUE(io::writeSafetensors(path, reshaped).ok());
  status = train::loadWeights(*executor, path, train::WeightSet::Parameters);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("has shape [" + std::to_string(reshaped[0].shape[0])));

  // A tensor the model does not have.
  float extra = 1.0f;
  std::vector<io::TensorView> more = views;
  more.push_back({"model.layers.9.mlp.up_proj.weight", "F32", {1}, &extra});
  ASSERT_TRUE(io::writeSafetensors(path, more).ok());
  status = train::loadWeights(*executor, path, train::WeightSet::Parameters);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor 'model.layers.9.mlp.up_proj.weight' is not a "
                        "parameter of the model"));

  // Ids where weights belong.
  std::vector<int32_t> ids(views[0].shape[0] * views[0].shape[1], 0);
  std::vector<io::TensorView> integer = views;
  integer[0].dtype = "I32";
  integer[0].data = ids.data();
  ASSERT_TRUE(io::writeSafetensors(path, integer).ok());
  status = train::loadWeights(*executor, path, train::WeightSet::Parameters);
  EXPECT_THAT(std::string(status.message()), HasSubstr("is I32, expected a float"));
}

TEST(WeightsTest, RefusesNaNAndInfinityNamingTheFileTensorAndElement) {
  ScratchDir dir;
  auto executor = makeMoeExecutor(1);
  std::string path = dir.file("w.safetensors");
  std::vector<io::TensorView> views =
      train::exportViews(*executor, train::WeightSet::Both);
  const io::TensorView &view = views[0];
  ASSERT_EQ(view.shape.size(), 2u);
  int64_t columns = view.shape[1];
  int64_t elements = view.shape[0] * columns;
  const float *original = static_cast<const float *>(view.data);
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> poisoned(original, original + elements);
    poisoned[columns + 2] = bad;
    poisoned[elements - 1] = bad; // only the first is named
    std::vector<io::TensorView> written = views;
    written[0].data = poisoned.data();
    ASSERT_TRUE(io::writeSafetensors(path, written).ok());
    absl::Status status =
        train::loadWeights(*executor, path, train::WeightSet::Both);
    EXPECT_EQ(std::string(status.message()),
              path + ": tensor '" + view.name + "' holds " +
                  (std::isnan(bad) ? "nan" : bad > 0 ? "inf" : "-inf") +
                  " at element [1, 2] (flat index " +
                  std::to_string(columns + 2) + ")");
  }
  // Optimizer state is checked as well when it is loaded.
  uint32_t state = executor->optimizerStates()[0];
  const Buffer &buffer = executor->program().buffers[state];
  std::vector<float> moments(buffer.numElements(), 0.0f);
  moments[0] = std::nanf("");
  std::vector<io::TensorView> written = views;
  for (io::TensorView &tensor : written)
    if (tensor.name == buffer.name)
      tensor.data = moments.data();
  ASSERT_TRUE(io::writeSafetensors(path, written).ok());
  EXPECT_THAT(std::string(train::loadWeights(*executor, path,
                                             train::WeightSet::Both)
                              .message()),
              HasSubstr("tensor '" + buffer.name + "' holds nan at element"));
}

} // namespace
