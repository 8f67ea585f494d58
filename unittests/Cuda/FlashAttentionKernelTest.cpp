//===- FlashAttentionKernelTest.cpp - BF16 attention on the GPU -----------===//
//
// The device half of FlashAttentionEmulationTest: the same problems and
// bounds, on the GPU's tensor cores. Also checks that two runs give the
// same bits (no atomics) and that shapes the kernels cannot run are
// refused before any launch.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"
#include "FlashAttentionCases.h"

#include "moe/Runtime/Cuda/Kernels.h"

#include <limits>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::FlashCase;
using testing::FlashProblem;

constexpr uint16_t kNanBits = 0x7fc0;

struct DeviceResults {
  std::vector<uint16_t> out, dq, dk, dv;
  std::vector<float> lse;
};

DeviceResults runOnDevice(const FlashCase &c, const FlashProblem &p) {
  DeviceArray<uint16_t> q(p.q), k(p.k), v(p.v), dout(p.dout);
  DeviceArray<uint16_t> out(std::vector<uint16_t>(c.qSize(), kNanBits));
  DeviceArray<float> lse(
      std::vector<float>(c.rows(), std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(flashAttentionForward(q.get(), k.get(), v.get(), out.get(),
                                    lse.get(), c.B, c.S, c.heads, c.kvHeads,
                                    c.headDim, nullptr)
                  .ok());
  DeviceArray<uint16_t> dq(std::vector<uint16_t>(c.qSize(), kNanBits));
  DeviceArray<uint16_t> dk(std::vector<uint16_t>(c.kvSize(), kNanBits));
  DeviceArray<uint16_t> dv(std::vector<uint16_t>(c.kvSize(), kNanBits));
  uint64_t workspaceBytes =
      flashAttentionBackwardWorkspaceBytes(c.B, c.S, c.heads);
  EXPECT_EQ(workspaceBytes, c.rows() * sizeof(float));
  DeviceArray<float> workspace(workspaceBytes / sizeof(float));
  EXPECT_TRUE(flashAttentionBackward(dout.get(), q.get(), k.get(), v.get(),
                                     out.get(), lse.get(), dq.get(), dk.get(),
                                     dv.get(), c.B, c.S, c.heads, c.kvHeads,
                                     c.headDim, workspace.get(), nullptr)
                  .ok());
  return {out.read(), dq.read(), dk.read(), dv.read(), lse.read()};
}

TEST(FlashAttentionKernelTest, MatchesCpuKernels) {
  for (const FlashCase &c : testing::flashCases()) {
    SCOPED_TRACE(c.describe());
    FlashProblem p = testing::makeFlashProblem(c);
    DeviceResults r = runOnDevice(c, p);
    testing::expectNearReference(testing::widen(r.out), p.out, "out");
    testing::expectLseNearReference(r.lse, p.lse);
    testing::expectNearReference(testing::widen(r.dq), p.dq, "dq");
    testing::expectNearReference(testing::widen(r.dk), p.dk, "dk");
    testing::expectNearReference(testing::widen(r.dv), p.dv, "dv");
  }
}

TEST(FlashAttentionKernelTest, SameBitsEveryRun) {
  FlashCase c{2, 300, 8, 2, 128, 61, 2.0f};
  FlashProblem p = testing::makeFlashProblem(c);
  DeviceResults first = runOnDevice(c, p), second = runOnDevice(c, p);
  EXPECT_EQ(first.out, second.out);
  EXPECT_EQ(first.lse, second.lse);
  EXPECT_EQ(first.dq, second.dq);
  EXPECT_EQ(first.dk, second.dk);
  EXPECT_EQ(first.dv, second.dv);
}

TEST(FlashAttentionKernelTest, RejectsShapesItCannotRun) {
  uint16_t *none = nullptr;
  float *noFloats = nullptr;
  EXPECT_FALSE(flashAttentionSupports(129));
  absl::Status wide = flashAttentionForward(none, none, none, none, noFloats, 1,
                                            8, 2, 1, 129, nullptr);
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument) << wide;
  absl::Status groups =
      flashAttentionBackward(none, none, none, none, none, noFloats, none, none,
                             none, 1, 8, 3, 2, 16, noFloats, nullptr);
  EXPECT_EQ(groups.code(), absl::StatusCode::kInvalidArgument) << groups;
}

} // namespace
} // namespace moe::rt::cuda
