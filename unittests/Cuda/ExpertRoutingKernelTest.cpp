//===- ExpertRoutingKernelTest.cpp - CUDA token permutation vs the CPU ----===//
//
// groupByExpert against a stable counting sort written out here (cpu's
// ExpertGroups is private to Experts.cpp), the gather and inverse exactly,
// and the combine against the CPU's expert-order loop: bit for bit where no
// FMA could tell the two apart (unit weights), and through
// cpu::expertsForward end to end.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

/// cpu's ExpertGroups: the flat slots grouped by expert, ascending within
/// each, ids outside [0, E) skipped.
struct HostGroups {
  std::vector<int64_t> offsets, slots;

  HostGroups(const std::vector<int32_t> &indices, int64_t E)
      : offsets(E + 1, 0) {
    auto valid = [&](int32_t e) { return e >= 0 && e < E; };
    for (int32_t e : indices)
      if (valid(e))
        ++offsets[e + 1];
    for (int64_t e = 0; e < E; ++e)
      offsets[e + 1] += offsets[e];
    slots.resize(offsets[E]);
    std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
    for (size_t s = 0; s < indices.size(); ++s)
      if (valid(indices[s]))
        slots[cursor[indices[s]]++] = static_cast<int64_t>(s);
  }

  int64_t rows() const { return offsets.back(); }
};

/// The router's ids with capacity drops (-1), plus a few ids outside
/// [0, E) that the grouping must skip as well.
std::vector<int32_t> routedIndices(int64_t T, int64_t E, int64_t topK,
                                   std::vector<float> *weights) {
  std::vector<float> logits = randomValues(T * E, 41, 2.0f);
  std::vector<float> probs(T * E);
  std::vector<int32_t> indices(T * topK);
  weights->resize(T * topK);
  cpu::routerForward(logits.data(), probs.data(), weights->data(),
                     indices.data(), T, E, topK, /*capacityFactor=*/0.5f);
  for (size_t s = 5; s < indices.size(); s += 97)
    indices[s] = static_cast<int32_t>(s % 2 ? E : E + 7);
  indices[1] = -3;
  return indices;
}

/// The device's grouping and its inverse.
struct DeviceGroups {
  DeviceArray<int64_t> offsets, slots, positionOfSlot;

  DeviceGroups(const DeviceArray<int32_t> &indices, int64_t T, int64_t E,
               int64_t topK)
      : offsets(E + 1), slots(T * topK), positionOfSlot(T * topK) {
    absl::Status status = groupByExpert(indices.get(), T, E, topK,
                                        offsets.get(), slots.get(), nullptr);
    EXPECT_TRUE(status.ok()) << status;
    status = invertSlots(slots.get(), offsets.get(), E, T * topK,
                         positionOfSlot.get(), nullptr);
    EXPECT_TRUE(status.ok()) << status;
  }
};

/// y = 0, then each expert's rows added into their tokens' rows, expert by
/// expert (cpu::expertsForward's combine).
std::vector<float> cpuCombine(const HostGroups &groups,
                              const std::vector<float> &rows,
                              const std::vector<float> &weights, int64_t T,
                              int64_t topK, int64_t width) {
  std::vector<float> y(T * width, 0.0f);
  for (int64_t r = 0; r < groups.rows(); ++r) {
    int64_t slot = groups.slots[r];
    float w = weights[slot];
    float *yt = y.data() + (slot / topK) * width;
    for (int64_t c = 0; c < width; ++c)
      yt[c] += w * rows[r * width + c];
  }
  return y;
}

struct RoutingShape {
  int64_t T, E, topK;
};

void PrintTo(const RoutingShape &shape, std::ostream *os) {
  *os << "T=" << shape.T << " E=" << shape.E << " topK=" << shape.topK;
}

class ExpertRoutingKernelTest : public ::testing::TestWithParam<RoutingShape> {
};

TEST_P(ExpertRoutingKernelTest, GroupsGathersAndCombinesAsTheCpu) {
  const auto [T, E, topK] = GetParam();
  const int64_t width = 67; // not a multiple of a warp
  const int64_t numSlots = T * topK;
  std::vector<float> weights;
  std::vector<int32_t> indices = routedIndices(T, E, topK, &weights);
  HostGroups expected(indices, E);
  ASSERT_GT(expected.rows(), 0);
  ASSERT_LT(expected.rows(), numSlots); // some slots are skipped

  DeviceArray<int32_t> dIndices(indices);
  DeviceGroups groups(dIndices, T, E, topK);
  EXPECT_EQ(groups.offsets.read(), expected.offsets);
  std::vector<int64_t> slots = groups.slots.read();
  slots.resize(expected.rows()); // the rest is unspecified
  EXPECT_EQ(slots, expected.slots);

  std::vector<int64_t> expectedPositions(numSlots, -1);
  for (int64_t r = 0; r < expected.rows(); ++r)
    expectedPositions[expected.slots[r]] = r;
  EXPECT_EQ(groups.positionOfSlot.read(), expectedPositions);

  // The gather copies rows: exact.
  std::vector<float> x = randomValues(T * width, 42);
  DeviceArray<float> dx(x), gathered(expected.rows() * width);
  ASSERT_TRUE(gatherRows(dx.get(), groups.slots.get(), expected.rows(), topK,
                         width, gathered.get(), nullptr)
                  .ok());
  std::vector<float> expectedRows(expected.rows() * width);
  for (int64_t r = 0; r < expected.rows(); ++r)
    std::copy_n(x.begin() + (expected.slots[r] / topK) * width, width,
                expectedRows.begin() + r * width);
  expectClose(gathered.read(), expectedRows, 0.0f, 0.0f, "gathered rows");

  // Unit weights make the products exact, FMA or not, so the sums must be
  // the CPU's bit for bit, which they are only in expert order. Rows of
  // very different sizes per expert make the order show in the last bits.
  std::vector<float> rows = randomValues(expected.rows() * width, 43);
  std::vector<float> scaledRows = rows;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = expected.offsets[e]; r < expected.offsets[e + 1]; ++r)
      for (int64_t c = 0; c < width; ++c)
        scaledRows[r * width + c] *=
            std::ldexp(1.0f, static_cast<int>(e % 7) * 3);
  std::vector<float> ones(numSlots, 1.0f);
  DeviceArray<float> dScaledRows(scaledRows), dOnes(ones), y(T * width);
  ASSERT_TRUE(combineRows(dScaledRows.get(), groups.positionOfSlot.get(),
                          dIndices.get(), dOnes.get(), T, topK, width, y.get(),
                          nullptr)
                  .ok());
  expectClose(y.read(), cpuCombine(expected, scaledRows, ones, T, topK, width),
              0.0f, 0.0f, "unit-weight combine");

  // The router's weights (dropped slots keep one, which must add nothing).
  // Equal to the CPU's bitwise too where its loop is not contracted into
  // FMAs (x86-64); the tolerance leaves room for a host that contracts.
  DeviceArray<float> dRows(rows), dWeights(weights);
  ASSERT_TRUE(combineRows(dRows.get(), groups.positionOfSlot.get(),
                          dIndices.get(), dWeights.get(), T, topK, width,
                          y.get(), nullptr)
                  .ok());
  expectClose(y.read(), cpuCombine(expected, rows, weights, T, topK, width),
              1e-6f, 1e-6f, "weighted combine");
}

// T not a multiple of a block (37, 1000); E below and above a warp. Only
// a token with three or more kept slots can tell the order of its sums
// (0 + a + b is 0 + b + a), hence topK 3 and 4 besides the usual 1 and 2.
INSTANTIATE_TEST_SUITE_P(
    Shapes, ExpertRoutingKernelTest,
    ::testing::Values(RoutingShape{37, 4, 1}, RoutingShape{37, 8, 2},
                      RoutingShape{37, 8, 3}, RoutingShape{1000, 4, 2},
                      RoutingShape{1000, 8, 1}, RoutingShape{1000, 8, 2},
                      RoutingShape{1000, 64, 1}, RoutingShape{1000, 64, 2},
                      RoutingShape{1000, 64, 4}));

// One token whose slots name experts 5, 1, 3: added in slot order its rows
// cancel to 1, in expert order (1e8 + 1 rounds to 1e8) to 0.
TEST(ExpertRoutingKernelTest, CombinesInExpertOrder) {
  const int64_t T = 1, E = 6, topK = 3;
  DeviceArray<int32_t> indices(std::vector<int32_t>{5, 1, 3});
  DeviceGroups groups(indices, T, E, topK);
  EXPECT_EQ(groups.offsets.read(), (std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(groups.slots.read(), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(groups.positionOfSlot.read(), (std::vector<int64_t>{2, 0, 1}));
  // Rows in group order: experts 1, 3, 5.
  DeviceArray<float> rows(std::vector<float>{1e8f, 1.0f, -1e8f});
  DeviceArray<float> weights(std::vector<float>{1.0f, 1.0f, 1.0f}), y(1);
  ASSERT_TRUE(combineRows(rows.get(), groups.positionOfSlot.get(),
                          indices.get(), weights.get(), T, topK, 1, y.get(),
                          nullptr)
                  .ok());
  EXPECT_EQ(y.read()[0], 0.0f);
}

TEST(ExpertRoutingKernelTest, EverySlotDropped) {
  const int64_t T = 37, E = 8, topK = 2, width = 5;
  DeviceArray<int32_t> indices(std::vector<int32_t>(T * topK, -1));
  DeviceGroups groups(indices, T, E, topK);
  EXPECT_EQ(groups.offsets.read(), std::vector<int64_t>(E + 1, 0));
  EXPECT_EQ(groups.positionOfSlot.read(), std::vector<int64_t>(T * topK, -1));
  // y is overwritten with zeros, whatever it held.
  DeviceArray<float> rows(1), weights(randomValues(T * topK, 44));
  DeviceArray<float> y(std::vector<float>(T * width, 3.0f));
  ASSERT_TRUE(combineRows(rows.get(), groups.positionOfSlot.get(),
                          indices.get(), weights.get(), T, topK, width, y.get(),
                          nullptr)
                  .ok());
  expectClose(y.read(), std::vector<float>(T * width, 0.0f), 0.0f, 0.0f, "y");
}

// The permutation around per-expert outputs reproduces cpu::expertsForward:
// each expert's outputs come from the CPU itself (one expert, its gathered
// rows, unit weight, so y is its output exactly), the device gathers the
// tokens and combines the outputs.
TEST(ExpertRoutingKernelTest, GatherAndCombineReproduceExpertsForward) {
  const int64_t T = 200, E = 8, topK = 2, H = 24, F = 40;
  std::vector<float> weights;
  std::vector<int32_t> indices = routedIndices(T, E, topK, &weights);
  std::vector<float> x = randomValues(T * H, 45);
  std::vector<float> w1 = randomValues(E * F * H, 46, 0.2f);
  std::vector<float> w3 = randomValues(E * F * H, 47, 0.2f);
  std::vector<float> w2 = randomValues(E * H * F, 48, 0.2f);
  std::vector<float> expected(T * H);
  cpu::expertsForward(x.data(), weights.data(), indices.data(), w1.data(),
                      w3.data(), w2.data(), expected.data(), T, H, F, E, topK);

  DeviceArray<int32_t> dIndices(indices);
  DeviceGroups groups(dIndices, T, E, topK);
  std::vector<int64_t> offsets = groups.offsets.read();
  int64_t numRows = offsets[E];
  DeviceArray<float> dx(x), gathered(numRows * H);
  ASSERT_TRUE(gatherRows(dx.get(), groups.slots.get(), numRows, topK, H,
                         gathered.get(), nullptr)
                  .ok());
  std::vector<float> xs = gathered.read(), outputs(numRows * H);
  for (int64_t e = 0; e < E; ++e) {
    int64_t begin = offsets[e], n = offsets[e + 1] - begin;
    if (n == 0)
      continue;
    std::vector<float> unit(n, 1.0f);
    std::vector<int32_t> expert0(n, 0);
    cpu::expertsForward(xs.data() + begin * H, unit.data(), expert0.data(),
                        w1.data() + e * F * H, w3.data() + e * F * H,
                        w2.data() + e * H * F, outputs.data() + begin * H, n, H,
                        F, /*E=*/1, /*topK=*/1);
  }
  DeviceArray<float> dOutputs(outputs), dWeights(weights), y(T * H);
  ASSERT_TRUE(combineRows(dOutputs.get(), groups.positionOfSlot.get(),
                          dIndices.get(), dWeights.get(), T, topK, H, y.get(),
                          nullptr)
                  .ok());
  expectClose(y.read(), expected, 1e-6f, 1e-6f, "experts forward");
}

TEST(ExpertRoutingKernelTest, RejectsWhatALaunchCannotTake) {
  // Nothing is launched: null pointers are never touched.
  EXPECT_TRUE(absl::IsInvalidArgument(
      groupByExpert(nullptr, -1, 8, 2, nullptr, nullptr, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      groupByExpert(nullptr, 8, 8, 0, nullptr, nullptr, nullptr)));
  const float *noRows = nullptr;
  float *noOutput = nullptr;
  EXPECT_TRUE(absl::IsInvalidArgument(
      gatherRows(noRows, nullptr, 8, 0, 4, noOutput, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(combineRows(
      noRows, nullptr, nullptr, nullptr, 8, 2048, 4, noOutput, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      invertSlots(nullptr, nullptr, 8, -1, nullptr, nullptr)));
}

} // namespace
} // namespace moe::rt::cuda
