//===- Bf16SumKernelTest.cpp - sums over ranks of BF16 blocks vs the CPU --===//
//
// sumBf16Rows is how the BF16 collectives add the ranks' blocks: in fp32,
// in rank order, rounded once to nearest even, as the CPU's comm::Group
// adds its fp32 images of BF16 values and the CPU rounds the sum. The
// device's sums must be the CPU's bit for bit.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::randomValues;

/// The CPU's sum of `parts` rows of n BF16 values: each row decoded, added
/// in fp32 in row order (comm::Group's sumRows), the total rounded once.
std::vector<uint16_t> cpuSum(const std::vector<uint16_t> &rows, int64_t parts,
                             int64_t n) {
  std::vector<float> wide(rows.size()), sum(n);
  cpu::castFromBf16(rows.data(), wide.data(), parts * n);
  for (int64_t i = 0; i < n; ++i) {
    float total = wide[i];
    for (int64_t r = 1; r < parts; ++r)
      total += wide[r * n + i];
    sum[i] = total;
  }
  std::vector<uint16_t> rounded(n);
  cpu::castToBf16(sum.data(), rounded.data(), n);
  return rounded;
}

TEST(Bf16SumKernelTest, RankOrderFp32SumsRoundedOnceAreTheCpus) {
  const int64_t n = 100003; // not a multiple of a block
  for (int64_t parts : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(parts);
    // Magnitudes far apart, so that the order and the single rounding
    // matter (a ring's per-hop rounding would differ).
    std::vector<float> values;
    for (int64_t r = 0; r < parts; ++r) {
      std::vector<float> row = randomValues(n, 100 + r, r % 2 ? 1e3f : 1e-2f);
      values.insert(values.end(), row.begin(), row.end());
    }
    std::vector<uint16_t> rows(values.size());
    cpu::castToBf16(values.data(), rows.data(), parts * n);
    DeviceArray<uint16_t> dRows(rows), out(n);
    ASSERT_TRUE(sumBf16Rows(dRows.get(), parts, n, out.get(), nullptr).ok());
    EXPECT_EQ(out.read(), cpuSum(rows, parts, n));
  }
}

TEST(Bf16SumKernelTest, InvalidArguments) {
  DeviceArray<uint16_t> rows(4), out(4);
  EXPECT_EQ(sumBf16Rows(rows.get(), 0, 4, out.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sumBf16Rows(rows.get(), 2, -1, out.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sumBf16Rows(rows.get(), 2, 0, out.get(), nullptr).ok());
}

} // namespace
} // namespace moe::rt::cuda
