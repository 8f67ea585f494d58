//===- WeightGradEmulationTest.cpp - weight-gradient sums on the CPU ------===//
//
// Runs the blocks of lib/Runtime/Cuda/WeightGradBlocks.h, which the GPU's
// embedding and RMSNorm backward kernels run, under SimtEmulator.h and
// compares them with the CPU kernels: the embedding table's gradient bit
// for bit, RMSNorm's weight gradient to double sums' rounding.
//
//===----------------------------------------------------------------------===//
#include "SimtEmulator.h"

#include "../../lib/Runtime/Cuda/WeightGradBlocks.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>

namespace moe::rt::cuda::testing {
namespace {

std::vector<float> normalValues(size_t n, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float &x : values)
    x = normal(generator);
  return values;
}

/// `values` as storage S: themselves (float), or their BF16 bits, with
/// `values` rounded to what the bits hold (the CPU reference reads those).
template <typename S> std::vector<S> stored(std::vector<float> &values);
template <> std::vector<float> stored(std::vector<float> &values) {
  return values;
}
template <> std::vector<uint16_t> stored(std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  cpu::castToBf16(values.data(), bits.data(), int64_t(values.size()));
  cpu::castFromBf16(bits.data(), values.data(), int64_t(values.size()));
  return bits;
}

int64_t columnTiles(int64_t H) {
  return (H + weightgrad::kColumns - 1) / weightgrad::kColumns;
}

template <typename S>
void expectEmbeddingGradMatchesCpu(int64_t T, int64_t V, int64_t H,
                                   int64_t parts, uint32_t seed) {
  SCOPED_TRACE("T " + std::to_string(T) + ", V " + std::to_string(V) + ", H " +
               std::to_string(H) + ", parts " + std::to_string(parts));
  std::vector<float> dy = normalValues(size_t(T * H), seed);
  std::vector<S> dyStored = stored<S>(dy);
  std::mt19937 generator(seed + 1);
  // Mostly a few frequent ids (long sums), and ids outside [0, V) that
  // take part in nothing.
  std::uniform_int_distribution<int32_t> frequent(0, 4),
      any(-2, int32_t(V) + 1);
  std::vector<int32_t> tokens(T);
  for (int32_t &id : tokens)
    id = generator() % 2 ? frequent(generator) : any(generator);
  std::vector<float> expected(size_t(V * H));
  cpu::embeddingBackward(dy.data(), tokens.data(), expected.data(), T, V, H);

  std::vector<float> dtable(size_t(V * H), 0.0f);
  weightgrad::EmbeddingGradArgs<S> args{
      dyStored.data(), tokens.data(), dtable.data(), T, V, H, parts};
  runEmulatedGrid(columnTiles(H), parts, 1, weightgrad::kColumns,
                  weightgrad::kEmbeddingGradSharedBytes,
                  [&](const HostSimt &simt) {
                    weightgrad::embeddingGradBlock(simt, args);
                  });
  EXPECT_EQ(dtable, expected);
}

TEST(WeightGradEmulationTest, EmbeddingGradientIsTheCpusBitForBit) {
  // Tokens over two shared-memory chunks; one column tile.
  expectEmbeddingGradMatchesCpu<float>(1100, 20, 40, 20, 1);
  // Two column tiles, the last partial; ids beyond the class count.
  expectEmbeddingGradMatchesCpu<float>(300, 70, 300, 64, 2);
  // A BF16 dy (mixed precision): its values, summed in fp32.
  expectEmbeddingGradMatchesCpu<uint16_t>(300, 70, 300, 64, 3);
}

template <typename S> void expectRmsNormWeightGradMatchesCpu() {
  const int64_t T = 300, H = 300;
  const float eps = 1e-5f;
  std::vector<float> x = normalValues(size_t(T * H), 3),
                     dy = normalValues(size_t(T * H), 4),
                     w = normalValues(size_t(H), 5);
  std::vector<S> xStored = stored<S>(x), dyStored = stored<S>(dy);
  std::vector<float> dx(static_cast<size_t>(T * H)),
      expected(static_cast<size_t>(H));
  cpu::rmsNormBackward(dy.data(), x.data(), w.data(), dx.data(),
                       expected.data(), T, H, eps);
  // Each row's 1 / rms, as the GPU's row kernel writes it.
  std::vector<float> reciprocals(T);
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0.0;
    for (int64_t c = 0; c < H; ++c)
      sum += double(x[t * H + c]) * x[t * H + c];
    reciprocals[t] = float(1.0 / std::sqrt(sum / double(H) + double(eps)));
  }
  int64_t chunks = weightgrad::rowChunks(T);
  ASSERT_EQ(chunks, 3);
  std::vector<double> partials(size_t(chunks * H),
                               std::numeric_limits<double>::quiet_NaN());
  std::vector<float> dw(size_t(H), std::numeric_limits<float>::quiet_NaN());
  weightgrad::RmsNormWeightGradArgs<S> args{dyStored.data(),
                                            xStored.data(),
                                            reciprocals.data(),
                                            partials.data(),
                                            dw.data(),
                                            T,
                                            H};
  runEmulatedGrid(columnTiles(H), chunks, 1, weightgrad::kColumns, 0,
                  [&](const HostSimt &simt) {
                    weightgrad::rmsNormWeightPartialsBlock(simt, args);
                  });
  runEmulatedGrid(columnTiles(H), 1, 1, weightgrad::kColumns, 0,
                  [&](const HostSimt &simt) {
                    weightgrad::rmsNormWeightSumBlock(simt, args);
                  });
  for (int64_t c = 0; c < H; ++c)
    EXPECT_NEAR(dw[c], expected[c], 1e-6 * std::fabs(expected[c]) + 1e-7)
        << "column " << c;
}

TEST(WeightGradEmulationTest, RmsNormWeightGradientMatchesCpu) {
  expectRmsNormWeightGradMatchesCpu<float>();
  expectRmsNormWeightGradMatchesCpu<uint16_t>();
}

} // namespace
} // namespace moe::rt::cuda::testing
