//===- Bf16KernelTest.cpp - CUDA BF16 storage kernels vs the CPU ----------===//
//
// Mixed precision (docs/precision.md) keeps BF16 buffers as BF16 bits on
// the device as on the CPU: the Cast opcode's two kernels, AdamW's BF16
// working copy and the collectives' packing of 2-byte elements must give
// the CPU's bits, so that a GPU run can be compared with a CPU run op by
// op.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"
#include "OneRankJob.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/Cuda/Nccl.h"

#include <cstring>
#include <limits>

namespace moe::rt::cuda {
namespace {

using testing::bitsOf;
using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}
bool isNanBf16(uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0;
}

/// Values where rounding to BF16 is decided: ties of both parities (to
/// even either way), just above and below a tie, the largest finite value
/// (rounds to infinity), subnormals, zeros of both signs and infinities,
/// then normal draws over several binades.
std::vector<float> roundingCases() {
  std::vector<float> values;
  for (uint32_t upper : {0x3f80u, 0x3f81u, 0xbf80u, 0xbf81u, 0x4b00u,
                         0x0001u, 0x8001u, 0x0080u, 0x7f7fu})
    for (uint32_t lower : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u,
                           0xffffu})
      values.push_back(floatOf(upper << 16 | lower));
  for (float special : {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min()})
    values.push_back(special);
  for (float std : {1e-30f, 1e-3f, 1.0f, 1e3f, 1e30f}) {
    std::vector<float> draws = randomValues(4099, 7, std);
    values.insert(values.end(), draws.begin(), draws.end());
  }
  return values;
}

// fp32 to BF16 rounds to nearest even as the CPU does, bit for bit; BF16
// to fp32 is exact (the upper half of the fp32 pattern).
TEST(Bf16KernelTest, CastsAreTheCpusBitForBit) {
  std::vector<float> values = roundingCases();
  int64_t n = static_cast<int64_t>(values.size());
  DeviceArray<float> dx(values), back(values.size());
  DeviceArray<uint16_t> narrow(values.size());
  ASSERT_TRUE(castToBf16(dx.get(), narrow.get(), n, nullptr).ok());
  std::vector<uint16_t> bits = narrow.read();
  std::vector<uint16_t> expected(values.size());
  cpu::castToBf16(values.data(), expected.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(bits[i], expected[i])
        << "element " << i << " = " << values[i] << " (bits 0x" << std::hex
        << bitsOf(values[i]) << ")";

  ASSERT_TRUE(castFromBf16(narrow.get(), back.get(), n, nullptr).ok());
  std::vector<float> wide = back.read();
  std::vector<float> expectedWide(values.size());
  cpu::castFromBf16(expected.data(), expectedWide.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(bitsOf(wide[i]), bitsOf(expectedWide[i])) << "element " << i;
}

// Every one of the 65536 BF16 patterns widens to the CPU's fp32 and
// narrows back to itself (NaNs to a NaN: the payload the device's
// conversion keeps is not part of the contract).
TEST(Bf16KernelTest, EveryBf16PatternRoundTrips) {
  const int64_t n = 65536;
  std::vector<uint16_t> patterns(n);
  for (int64_t i = 0; i < n; ++i)
    patterns[i] = static_cast<uint16_t>(i);
  DeviceArray<uint16_t> dPatterns(patterns), narrow(n);
  DeviceArray<float> wide(n);
  ASSERT_TRUE(castFromBf16(dPatterns.get(), wide.get(), n, nullptr).ok());
  std::vector<float> widened = wide.read();
  std::vector<float> expected(n);
  cpu::castFromBf16(patterns.data(), expected.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(bitsOf(widened[i]), bitsOf(expected[i])) << "pattern " << i;
  ASSERT_TRUE(castToBf16(wide.get(), narrow.get(), n, nullptr).ok());
  std::vector<uint16_t> again = narrow.read();
  for (int64_t i = 0; i < n; ++i) {
    if (isNanBf16(patterns[i]))
      EXPECT_TRUE(isNanBf16(again[i])) << "pattern " << i;
    else
      ASSERT_EQ(again[i], patterns[i]) << "pattern " << i;
  }
}

// AdamW with a working copy: the master, moments and step as without one
// (the same kernel), and working = bf16(updated master), rounded to
// nearest even, after every step; without a working copy nothing else is
// written.
TEST(Bf16KernelTest, AdamwWritesTheRoundedMasterIntoTheWorkingCopy) {
  const int64_t n = 100003; // not a multiple of a block
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  const float weightDecay = 0.1f, gradScale = 0.37f;
  std::vector<float> param = randomValues(n, 71);
  std::vector<float> expAvg(n, 0.0f), expAvgSq(n, 0.0f);
  DeviceArray<float> dParam(param), dExpAvg(expAvg), dExpAvgSq(expAvgSq);
  DeviceArray<float> dScale(std::vector<float>{gradScale});
  DeviceArray<uint16_t> working(std::vector<uint16_t>(n, 0x7fad));
  for (int64_t step = 0; step <= 3; ++step) {
    SCOPED_TRACE(step);
    std::vector<float> grad = randomValues(n, 80 + step, 0.5f);
    DeviceArray<float> dGrad(grad);
    ASSERT_TRUE(adamw(dParam.get(), dGrad.get(), dScale.get(), dExpAvg.get(),
                      dExpAvgSq.get(), n, lr, beta1, beta2, eps, weightDecay,
                      step, nullptr, working.get())
                    .ok());
    std::vector<float> scaled = grad;
    for (float &g : scaled)
      g *= gradScale;
    cpu::adamw(param.data(), scaled.data(), expAvg.data(), expAvgSq.data(), n,
               lr, beta1, beta2, eps, weightDecay, step);
    std::vector<float> master = dParam.read();
    expectClose(master, param, 1e-6f, 1e-7f, "param");
    expectClose(dExpAvg.read(), expAvg, 1e-6f, 1e-7f, "expAvg");
    // The copy is the device's own master rounded: bitwise, whatever the
    // master's last ulp against the CPU's.
    std::vector<uint16_t> expected(n);
    cpu::castToBf16(master.data(), expected.data(), n);
    std::vector<uint16_t> bits = working.read();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bits[i], expected[i]) << "working[" << i << "]";
  }
  // No working copy: the same update, and the old copy left as it was.
  std::vector<uint16_t> before = working.read();
  DeviceArray<float> dGrad(randomValues(n, 90, 0.5f));
  ASSERT_TRUE(adamw(dParam.get(), dGrad.get(), dScale.get(), dExpAvg.get(),
                    dExpAvgSq.get(), n, lr, beta1, beta2, eps, weightDecay, 4,
                    nullptr)
                  .ok());
  EXPECT_EQ(working.read(), before);
}

// The collectives' packing around a dimension moves 2-byte BF16 elements
// as it moves 4-byte ones.
TEST(Bf16KernelTest, InterleaveBlocksOfBf16) {
  const int64_t outer = 3, parts = 4, chunk = 5, n = outer * parts * chunk;
  std::vector<uint16_t> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<uint16_t>(0x3f80 + i);
  DeviceArray<uint16_t> dx(x), packed(n), back(n);
  ASSERT_TRUE(interleaveBlocks(dx.get(), packed.get(), outer, parts, chunk,
                               /*pack=*/true, nullptr, /*elementBytes=*/2)
                  .ok());
  std::vector<uint16_t> expected(n);
  for (int64_t r = 0; r < parts; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < chunk; ++c)
        expected[(r * outer + o) * chunk + c] = x[(o * parts + r) * chunk + c];
  EXPECT_EQ(packed.read(), expected);
  ASSERT_TRUE(interleaveBlocks(packed.get(), back.get(), outer, parts, chunk,
                               /*pack=*/false, nullptr, /*elementBytes=*/2)
                  .ok());
  EXPECT_EQ(back.read(), x);
  EXPECT_EQ(interleaveBlocks(dx.get(), packed.get(), outer, parts, chunk,
                             /*pack=*/true, nullptr, /*elementBytes=*/3)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The BF16 NCCL calls (ncclBfloat16) on a group of one: the identity, bit
// for bit (NcclKernelTest's plumbing, for the overloads BF16 buffers use).
TEST(Bf16KernelTest, Bf16CollectivesOnAGroupOfOne) {
  absl::StatusOr<testing::OneRankJob> job = testing::oneRankJob();
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<NcclGroup>> group =
      job->nccl->split(*job->everyone);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<float> values = randomValues(1000, 3);
  std::vector<uint16_t> bits(values.size());
  cpu::castToBf16(values.data(), bits.data(), 1000);
  DeviceArray<uint16_t> data(bits), scattered(1000), rows(1000);
  ASSERT_TRUE((*group)->allReduceSum(data.get(), 1000, nullptr).ok());
  EXPECT_EQ(data.read(), bits);
  ASSERT_TRUE(
      (*group)->reduceScatterSum(data.get(), scattered.get(), 1000, nullptr)
          .ok());
  EXPECT_EQ(scattered.read(), bits);
  ASSERT_TRUE(
      (*group)->allToAllRows(data.get(), {100}, rows.get(), {100}, 10, nullptr)
          .ok());
  EXPECT_EQ(rows.read(), bits);
}

} // namespace
} // namespace moe::rt::cuda
