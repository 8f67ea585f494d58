//===- Bf16StorageKernelTest.cpp - kernels on BF16 storage, on the GPU ----===//
//
// The kernels templated on the storage type (Storage.cuh) must give, on
// BF16 buffers, the bits their fp32 form gives on widened copies with each
// result rounded once: that is the claim that lets the dispatch skip the
// widening (DeviceBf16.cpp). Each case runs both on the same BF16 inputs
// and compares bit for bit.
//
//===----------------------------------------------------------------------===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::randomValues;

/// Random BF16 bits, and their exact fp32 values.
struct Bf16Input {
  std::vector<uint16_t> bits;
  std::vector<float> values;
  Bf16Input(size_t n, uint32_t seed, float std = 1.0f)
      : bits(n), values(randomValues(n, seed, std)) {
    cpu::castToBf16(values.data(), bits.data(), int64_t(n));
    cpu::castFromBf16(bits.data(), values.data(), int64_t(n));
  }
};

/// The fp32 kernel's results rounded once, as the BF16 kernel must give.
std::vector<uint16_t> rounded(const std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  cpu::castToBf16(values.data(), bits.data(), int64_t(values.size()));
  return bits;
}

TEST(Bf16StorageKernelTest, ElementwiseGiveTheWidenedBits) {
  const int64_t n = 10007;
  Bf16Input a(n, 1), b(n, 2), dy(n, 3);
  DeviceArray<uint16_t> aBits(a.bits), bBits(b.bits), dyBits(dy.bits);
  DeviceArray<float> aWide(a.values), bWide(b.values), dyWide(dy.values);
  DeviceArray<uint16_t> y(n), dgate(n), dup(n);
  DeviceArray<float> yWide(n), dgateWide(n), dupWide(n);

  ASSERT_TRUE(add(aBits.get(), bBits.get(), y.get(), n, nullptr).ok());
  ASSERT_TRUE(add(aWide.get(), bWide.get(), yWide.get(), n, nullptr).ok());
  EXPECT_EQ(y.read(), rounded(yWide.read())) << "add";

  ASSERT_TRUE(
      swigluForward(aBits.get(), bBits.get(), y.get(), n, nullptr).ok());
  ASSERT_TRUE(
      swigluForward(aWide.get(), bWide.get(), yWide.get(), n, nullptr).ok());
  EXPECT_EQ(y.read(), rounded(yWide.read())) << "swigluForward";
  // fp32 in, BF16 out (the experts' activation): the same bits.
  DeviceArray<uint16_t> fromWide(n);
  ASSERT_TRUE(
      swigluForward(aWide.get(), bWide.get(), fromWide.get(), n, nullptr).ok());
  EXPECT_EQ(fromWide.read(), rounded(yWide.read())) << "swigluForward (fp32)";

  ASSERT_TRUE(swigluBackward(dyBits.get(), aBits.get(), bBits.get(),
                             dgate.get(), dup.get(), n, nullptr)
                  .ok());
  ASSERT_TRUE(swigluBackward(dyWide.get(), aWide.get(), bWide.get(),
                             dgateWide.get(), dupWide.get(), n, nullptr)
                  .ok());
  EXPECT_EQ(dgate.read(), rounded(dgateWide.read())) << "swigluBackward dgate";
  EXPECT_EQ(dup.read(), rounded(dupWide.read())) << "swigluBackward dup";
}

TEST(Bf16StorageKernelTest, RmsNormAndRopeGiveTheWidenedBits) {
  const int64_t B = 2, S = 37, heads = 3, headDim = 64, H = heads * headDim;
  const int64_t T = B * S;
  Bf16Input x(T * H, 4), w(H, 5), dy(T * H, 6);
  DeviceArray<uint16_t> xBits(x.bits), wBits(w.bits), dyBits(dy.bits);
  DeviceArray<float> xWide(x.values), wWide(w.values), dyWide(dy.values);
  DeviceArray<uint16_t> y(T * H), dx(T * H);
  DeviceArray<float> yWide(T * H), dxWide(T * H), dw(H), dwWide(H);

  ASSERT_TRUE(
      rmsNormForward(xBits.get(), wBits.get(), y.get(), T, H, 1e-5f, nullptr)
          .ok());
  ASSERT_TRUE(rmsNormForward(xWide.get(), wWide.get(), yWide.get(), T, H, 1e-5f,
                             nullptr)
                  .ok());
  EXPECT_EQ(y.read(), rounded(yWide.read())) << "rmsNormForward";

  ASSERT_TRUE(rmsNormBackward(dyBits.get(), xBits.get(), wBits.get(), dx.get(),
                              dw.get(), T, H, 1e-5f, nullptr)
                  .ok());
  ASSERT_TRUE(rmsNormBackward(dyWide.get(), xWide.get(), wWide.get(),
                              dxWide.get(), dwWide.get(), T, H, 1e-5f, nullptr)
                  .ok());
  EXPECT_EQ(dx.read(), rounded(dxWide.read())) << "rmsNormBackward dx";
  EXPECT_EQ(dw.read(), dwWide.read()) << "rmsNormBackward dw";

  for (bool forward : {true, false}) {
    auto status = forward ? ropeForward(xBits.get(), y.get(), B, S, heads,
                                        headDim, 10000.0f, nullptr)
                          : ropeBackward(xBits.get(), y.get(), B, S, heads,
                                         headDim, 10000.0f, nullptr);
    ASSERT_TRUE(status.ok()) << status;
    status = forward ? ropeForward(xWide.get(), yWide.get(), B, S, heads,
                                   headDim, 10000.0f, nullptr)
                     : ropeBackward(xWide.get(), yWide.get(), B, S, heads,
                                    headDim, 10000.0f, nullptr);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(y.read(), rounded(yWide.read()))
        << (forward ? "ropeForward" : "ropeBackward");
  }
}

TEST(Bf16StorageKernelTest, CrossEntropyAndEmbeddingGiveTheWidenedBits) {
  const int64_t T = 67, V = 1000, H = 96;
  Bf16Input logits(T * V, 7, 3.0f), table(V * H, 8), dy(T * H, 9);
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t)
    ids[t] = t % 5 == 0 ? -100 : int32_t((t * 7919) % V);
  DeviceArray<int32_t> targets(ids);
  DeviceArray<uint16_t> logitBits(logits.bits), dlogits(T * V);
  DeviceArray<float> logitWide(logits.values), dlogitWide(T * V);
  DeviceArray<double> sum(1), sumWide(1);
  DeviceArray<unsigned long long> count(1), countWide(1);
  for (DeviceArray<double> *s : {&sum, &sumWide})
    ASSERT_EQ(cudaMemset(s->get(), 0, sizeof(double)), cudaSuccess);
  for (DeviceArray<unsigned long long> *c : {&count, &countWide})
    ASSERT_EQ(cudaMemset(c->get(), 0, sizeof(unsigned long long)), cudaSuccess);
  ASSERT_TRUE(crossEntropySums(logitBits.get(), targets.get(), T, V, sum.get(),
                               count.get(), nullptr)
                  .ok());
  ASSERT_TRUE(crossEntropySums(logitWide.get(), targets.get(), T, V,
                               sumWide.get(), countWide.get(), nullptr)
                  .ok());
  EXPECT_EQ(sum.read(), sumWide.read()) << "crossEntropySums";
  ASSERT_TRUE(crossEntropyBackward(0.5f, logitBits.get(), targets.get(),
                                   dlogits.get(), T, V, 50, nullptr)
                  .ok());
  ASSERT_TRUE(crossEntropyBackward(0.5f, logitWide.get(), targets.get(),
                                   dlogitWide.get(), T, V, 50, nullptr)
                  .ok());
  EXPECT_EQ(dlogits.read(), rounded(dlogitWide.read())) << "dlogits";

  std::vector<int32_t> tokenIds(T);
  for (int64_t t = 0; t < T; ++t)
    tokenIds[t] = int32_t((t * 31) % V);
  DeviceArray<int32_t> tokens(tokenIds);
  DeviceArray<uint16_t> tableBits(table.bits), y(T * H), dyBits(dy.bits);
  DeviceArray<float> tableWide(table.values), yWide(T * H), dyWide(dy.values);
  DeviceArray<float> dtable(V * H), dtableWide(V * H);
  DeviceArray<int64_t> firstBad(1);
  ASSERT_TRUE(embeddingForward(tokens.get(), tableBits.get(), y.get(), T, V, H,
                               firstBad.get(), nullptr)
                  .ok());
  ASSERT_TRUE(embeddingForward(tokens.get(), tableWide.get(), yWide.get(), T, V,
                               H, firstBad.get(), nullptr)
                  .ok());
  EXPECT_EQ(y.read(), rounded(yWide.read())) << "embeddingForward";
  ASSERT_TRUE(embeddingBackward(dyBits.get(), tokens.get(), dtable.get(), T, V,
                                H, nullptr)
                  .ok());
  ASSERT_TRUE(embeddingBackward(dyWide.get(), tokens.get(), dtableWide.get(), T,
                                V, H, nullptr)
                  .ok());
  EXPECT_EQ(dtable.read(), dtableWide.read()) << "embeddingBackward";
}

// The experts on one rank read x (and dy) as stored and write y (dx) so:
// rows gathered from BF16 are the widened rows' bits, and a BF16 combine
// is the fp32 combine rounded once.
TEST(Bf16StorageKernelTest, ExpertRowsGiveTheWidenedBits) {
  const int64_t T = 37, topK = 2, H = 96;
  Bf16Input x(T * H, 7);
  std::vector<int64_t> slots;
  for (int64_t s = T * topK - 1; s >= 0; s -= 3)
    slots.push_back(s);
  int64_t rows = static_cast<int64_t>(slots.size());
  DeviceArray<uint16_t> xBits(x.bits);
  DeviceArray<float> xWide(x.values);
  DeviceArray<int64_t> dSlots(slots);
  DeviceArray<uint16_t> asStored(rows * H);
  DeviceArray<float> widened(rows * H), fromWide(rows * H);
  ASSERT_TRUE(gatherRows(xBits.get(), dSlots.get(), rows, topK, H,
                         asStored.get(), nullptr)
                  .ok());
  ASSERT_TRUE(gatherRows(xBits.get(), dSlots.get(), rows, topK, H,
                         widened.get(), nullptr)
                  .ok());
  ASSERT_TRUE(gatherRows(xWide.get(), dSlots.get(), rows, topK, H,
                         fromWide.get(), nullptr)
                  .ok());
  EXPECT_EQ(widened.read(), fromWide.read()) << "BF16 rows widened";
  EXPECT_EQ(asStored.read(), rounded(fromWide.read())) << "BF16 rows as stored";

  // Each slot's row (every third slot has one, the others are dropped),
  // weighted and added per token.
  std::vector<int64_t> positions(T * topK, -1);
  for (int64_t r = 0; r < rows; ++r)
    positions[slots[r]] = r;
  std::vector<int32_t> indices(T * topK);
  for (int64_t s = 0; s < T * topK; ++s)
    indices[s] = static_cast<int32_t>((s * 5) % 8);
  DeviceArray<int64_t> dPositions(positions);
  DeviceArray<int32_t> dIndices(indices);
  DeviceArray<float> weights(randomValues(T * topK, 8));
  DeviceArray<uint16_t> y(T * H);
  DeviceArray<float> yWide(T * H);
  ASSERT_TRUE(combineRows(fromWide.get(), dPositions.get(), dIndices.get(),
                          weights.get(), T, topK, H, y.get(), nullptr)
                  .ok());
  ASSERT_TRUE(combineRows(fromWide.get(), dPositions.get(), dIndices.get(),
                          weights.get(), T, topK, H, yWide.get(), nullptr)
                  .ok());
  EXPECT_EQ(y.read(), rounded(yWide.read())) << "combineRows into BF16";
}

} // namespace
} // namespace moe::rt::cuda
