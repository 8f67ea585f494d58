//===- AttentionKernelTest.cpp - CUDA causal attention vs the CPU ---------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <limits>
#include <string>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

struct AttentionShape {
  int64_t B, S, heads, kvHeads, headDim;
};

std::string describe(const AttentionShape &shape) {
  return "B " + std::to_string(shape.B) + ", S " + std::to_string(shape.S) +
         ", heads " + std::to_string(shape.heads) + ", kvHeads " +
         std::to_string(shape.kvHeads) + ", headDim " +
         std::to_string(shape.headDim);
}

/// Runs both directions on the GPU and the CPU from the same random inputs
/// and compares every output. The backward of both sides starts from the
/// CPU's out and lse, so a forward error cannot hide in (or cause) a
/// backward one.
void expectMatchesCpu(const AttentionShape &shape, uint32_t seed) {
  SCOPED_TRACE(describe(shape));
  const auto [B, S, heads, kvHeads, headDim] = shape;
  size_t qSize = B * S * heads * headDim, kvSize = B * S * kvHeads * headDim;
  size_t lseSize = B * heads * S;
  std::vector<float> q = randomValues(qSize, seed);
  std::vector<float> k = randomValues(kvSize, seed + 1);
  std::vector<float> v = randomValues(kvSize, seed + 2);
  std::vector<float> dout = randomValues(qSize, seed + 3);

  std::vector<float> out(qSize), lse(lseSize);
  cpu::attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), B,
                        S, heads, kvHeads, headDim);
  std::vector<float> dq(qSize), dk(kvSize), dv(kvSize);
  cpu::attentionBackward(dout.data(), q.data(), k.data(), v.data(), out.data(),
                         lse.data(), dq.data(), dk.data(), dv.data(), B, S,
                         heads, kvHeads, headDim);

  // Outputs start as NaN, so an element the kernels never write fails.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceArray<float> dQ(q), dK(k), dV(v), dDout(dout);
  DeviceArray<float> dOut(std::vector<float>(qSize, nan));
  DeviceArray<float> dLse(std::vector<float>(lseSize, nan));
  ASSERT_TRUE(attentionForward(dQ.get(), dK.get(), dV.get(), dOut.get(),
                               dLse.get(), B, S, heads, kvHeads, headDim,
                               nullptr)
                  .ok());
  expectClose(dOut.read(), out, 1e-4f, 1e-5f, "out");
  expectClose(dLse.read(), lse, 1e-4f, 1e-5f, "lse");

  DeviceArray<float> cpuOut(out), cpuLse(lse);
  DeviceArray<float> dDq(std::vector<float>(qSize, nan));
  DeviceArray<float> dDk(std::vector<float>(kvSize, nan));
  DeviceArray<float> dDv(std::vector<float>(kvSize, nan));
  uint64_t workspaceBytes = attentionBackwardWorkspaceBytes(B, S, heads);
  ASSERT_EQ(workspaceBytes, lseSize * sizeof(float));
  DeviceArray<float> workspace(workspaceBytes / sizeof(float));
  ASSERT_TRUE(attentionBackward(dDout.get(), dQ.get(), dK.get(), dV.get(),
                                cpuOut.get(), cpuLse.get(), dDq.get(),
                                dDk.get(), dDv.get(), B, S, heads, kvHeads,
                                headDim, workspace.get(), nullptr)
                  .ok());
  expectClose(dDq.read(), dq, 1e-4f, 1e-5f, "dq");
  expectClose(dDk.read(), dk, 1e-4f, 1e-5f, "dk");
  expectClose(dDv.read(), dv, 1e-4f, 1e-5f, "dv");
}

TEST(AttentionKernelTest, MultiHead) {
  // S = 37: neither a multiple of a warp nor of the CPU's 64-row blocks.
  expectMatchesCpu({/*B=*/2, /*S=*/37, /*heads=*/4, /*kvHeads=*/4,
                    /*headDim=*/16},
                   10);
}

TEST(AttentionKernelTest, GroupedQuery) {
  expectMatchesCpu({/*B=*/2, /*S=*/37, /*heads=*/4, /*kvHeads=*/2,
                    /*headDim=*/64},
                   20);
}

TEST(AttentionKernelTest, MultiQueryAcrossCpuBlocks) {
  // One kv head for three query heads; S spans two of the CPU's row blocks
  // and headDim leaves most of a lane slice as padding.
  expectMatchesCpu({/*B=*/2, /*S=*/70, /*heads=*/3, /*kvHeads=*/1,
                    /*headDim=*/40},
                   30);
}

TEST(AttentionKernelTest, WidestHeads) {
  expectMatchesCpu({/*B=*/1, /*S=*/33, /*heads=*/2, /*kvHeads=*/1,
                    /*headDim=*/256},
                   40);
}

TEST(AttentionKernelTest, RejectsShapesItCannotRun) {
  // Rejected before any launch, so no device memory is needed.
  float *none = nullptr;
  absl::Status wide =
      attentionForward(none, none, none, none, none, 1, 8, 2, 1, 257, nullptr);
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument) << wide;
  absl::Status groups =
      attentionBackward(none, none, none, none, none, none, none, none, none, 1,
                        8, 3, 2, 16, none, nullptr);
  EXPECT_EQ(groups.code(), absl::StatusCode::kInvalidArgument) << groups;
}

} // namespace
} // namespace moe::rt::cuda
