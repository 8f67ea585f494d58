//===- FlashAttentionEmulationTest.cpp - attention, emulated --------------===//
//
// Runs the blocks of lib/Runtime/Cuda/FlashAttentionBlocks.h, the same code
// the GPU kernels run, under SimtEmulator.h and compares them with the fp32
// CPU kernels. No GPU needed: this is what holds the tiling, the causal
// mask, the online softmax, the GQA indexing and the barriers here.
//
//===----------------------------------------------------------------------===//
#include "FlashAttentionCases.h"
#include "SimtEmulator.h"

#include "../../lib/Runtime/Cuda/FlashAttentionBlocks.h"

#include <limits>

namespace moe::rt::cuda::testing {
namespace {

/// The GPU launches of FlashAttention.cu, emulated.
struct EmulatedFlashAttention {
  const FlashCase &c;

  flash::Shape shape() const {
    float scale = 1.0f / std::sqrt(static_cast<float>(c.headDim));
    return {
        c.B, c.S, c.heads, c.kvHeads, c.headDim, scale, scale * flash::kLog2e};
  }
  int64_t tiles() const { return (c.S + flash::kTile - 1) / flash::kTile; }

  template <int D> void forward(const flash::ForwardArgs &args) const {
    runEmulatedGrid(tiles(), c.heads, c.B, flash::kBlockThreads,
                    flash::ForwardLayout<D>::kBytes, [&](const HostSimt &simt) {
                      flash::forwardBlock<D>(simt, args);
                    });
  }
  template <int D> void backward(const flash::BackwardArgs &args) const {
    int64_t rowBlocks = (int64_t(c.rows()) + flash::kWarps - 1) / flash::kWarps;
    runEmulatedGrid(
        rowBlocks, 1, 1, flash::kBlockThreads, 0,
        [&](const HostSimt &simt) { flash::rowDotBlock(simt, args); });
    runEmulatedGrid(
        tiles(), c.kvHeads, c.B, flash::kBlockThreads,
        flash::KeyValueGradLayout<D>::kBytes,
        [&](const HostSimt &simt) { flash::keyValueGradBlock<D>(simt, args); });
    runEmulatedGrid(
        tiles(), c.heads, c.B, flash::kBlockThreads,
        flash::QueryGradLayout<D>::kBytes,
        [&](const HostSimt &simt) { flash::queryGradBlock<D>(simt, args); });
  }
};

constexpr uint16_t kNanBits = 0x7fc0;

void expectMatchesCpu(const FlashCase &c) {
  SCOPED_TRACE(c.describe());
  FlashProblem p = makeFlashProblem(c);
  EmulatedFlashAttention run{c};
  // Outputs start as NaN: an element no block writes fails.
  std::vector<uint16_t> out(c.qSize(), kNanBits);
  std::vector<float> lse(c.rows(), std::numeric_limits<float>::quiet_NaN());
  flash::ForwardArgs forward{p.q.data(), p.k.data(), p.v.data(),
                             out.data(), lse.data(), run.shape()};
  if (c.headDim <= 64)
    run.forward<64>(forward);
  else
    run.forward<128>(forward);
  expectNearReference(widen(out), p.out, "out");
  expectLseNearReference(lse, p.lse);

  std::vector<uint16_t> dq(c.qSize(), kNanBits), dk(c.kvSize(), kNanBits),
      dv(c.kvSize(), kNanBits);
  std::vector<float> delta(c.rows(), std::numeric_limits<float>::quiet_NaN());
  flash::BackwardArgs backward{
      p.dout.data(), p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(),
      delta.data(),  dq.data(),  dk.data(),  dv.data(),  run.shape()};
  if (c.headDim <= 64)
    run.backward<64>(backward);
  else
    run.backward<128>(backward);
  expectNearReference(widen(dq), p.dq, "dq");
  expectNearReference(widen(dk), p.dk, "dk");
  expectNearReference(widen(dv), p.dv, "dv");
}

TEST(FlashAttentionEmulationTest, MatchesCpuKernels) {
  for (const FlashCase &c : flashCases())
    expectMatchesCpu(c);
}

TEST(FlashAttentionEmulationTest, SharedMemoryFitsEveryGpu) {
  // sm_80 lets a block opt in to 163 KiB (166912 bytes); sm_90 to 227 KiB.
  constexpr size_t kSm80 = 166912;
  EXPECT_LE(flash::ForwardLayout<128>::kBytes, kSm80);
  EXPECT_LE(flash::KeyValueGradLayout<128>::kBytes, kSm80);
  EXPECT_LE(flash::QueryGradLayout<128>::kBytes, kSm80);
}

} // namespace
} // namespace moe::rt::cuda::testing
