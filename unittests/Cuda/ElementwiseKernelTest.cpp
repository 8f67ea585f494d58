//===- ElementwiseKernelTest.cpp - CUDA elementwise kernels vs the CPU ----===//
#include "DeviceTesting.h"

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"

#include <cstring>

namespace moe::rt::cuda {
namespace {

using testing::DeviceArray;
using testing::expectClose;
using testing::randomValues;

TEST(ElementwiseKernelTest, AddAndSwiglu) {
  const int64_t n = 100003; // not a multiple of a block
  std::vector<float> a = randomValues(n, 1), b = randomValues(n, 2);
  std::vector<float> dy = randomValues(n, 3);
  DeviceArray<float> da(a), db(b), ddy(dy), y(n), dgate(n), dup(n);
  ASSERT_TRUE(add(da.get(), db.get(), y.get(), n, nullptr).ok());
  std::vector<float> expected(n);
  cpu::add(a.data(), b.data(), expected.data(), n);
  expectClose(y.read(), expected, 0.0f, 0.0f, "add");

  ASSERT_TRUE(swigluForward(da.get(), db.get(), y.get(), n, nullptr).ok());
  cpu::swigluForward(a.data(), b.data(), expected.data(), n);
  expectClose(y.read(), expected, 1e-6f, 1e-7f, "swiglu");

  ASSERT_TRUE(swigluBackward(ddy.get(), da.get(), db.get(), dgate.get(),
                             dup.get(), n, nullptr)
                  .ok());
  std::vector<float> expectedGate(n), expectedUp(n);
  cpu::swigluBackward(dy.data(), a.data(), b.data(), expectedGate.data(),
                      expectedUp.data(), n);
  expectClose(dgate.read(), expectedGate, 1e-5f, 1e-7f, "dgate");
  expectClose(dup.read(), expectedUp, 1e-5f, 1e-7f, "dup");
}

// A pipeline's mean over microbatches (DevicePipeline): x / divisor, the
// IEEE quotient, as the CPU's.
TEST(ElementwiseKernelTest, DivideIsTheIeeeQuotient) {
  const int64_t n = 70001;
  std::vector<float> x = randomValues(n, 9, 100.0f);
  DeviceArray<float> dx(x), y(n);
  ASSERT_TRUE(divide(dx.get(), 3.0f, y.get(), n, nullptr).ok());
  std::vector<float> expected(n);
  for (int64_t i = 0; i < n; ++i)
    expected[i] = x[i] / 3.0f;
  expectClose(y.read(), expected, 0.0f, 0.0f, "divide");
}

// FP8 token dispatch: the device packs each row into the words a CPU rank
// sends (cpu::packFp8Row), word for word, and unpacks them into the values
// the CPU's unpacking gives, bit for bit; rows wider than a block and a
// width that is not a multiple of it included.
TEST(ElementwiseKernelTest, Fp8RowsPackAsTheCpu) {
  for (auto [width, block] : {std::pair<int64_t, int64_t>{256, 128},
                              {200, 64}, {7, 128}}) {
    const int64_t count = 37;
    std::vector<float> rows = randomValues(count * width, 11, 50.0f);
    rows[3] = 0.0f;
    rows[5] = 1e-30f;
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      cpu::Fp8Format cpuFormat = format == Fp8Format::E4M3
                                     ? cpu::Fp8Format::E4M3
                                     : cpu::Fp8Format::E5M2;
      SCOPED_TRACE(::testing::Message() << cpu::fp8FormatName(cpuFormat)
                                        << " width " << width << " block "
                                        << block);
      int64_t words = cpu::packedFp8Words(width, block);
      std::vector<int32_t> expectedWords(count * words);
      std::vector<float> expectedRows(count * width);
      for (int64_t r = 0; r < count; ++r) {
        cpu::packFp8Row(&rows[r * width], width, block, cpuFormat,
                        &expectedWords[r * words]);
        cpu::unpackFp8Row(&expectedWords[r * words], width, block, cpuFormat,
                          &expectedRows[r * width]);
      }
      DeviceArray<float> dRows(rows), unpacked(count * width);
      DeviceArray<int32_t> packed(count * words);
      ASSERT_TRUE(packFp8Rows(dRows.get(), count, width, block, format,
                              packed.get(), nullptr)
                      .ok());
      ASSERT_EQ(packed.read(), expectedWords);
      ASSERT_TRUE(unpackFp8Rows(packed.get(), count, width, block, format,
                                unpacked.get(), nullptr)
                      .ok());
      expectClose(unpacked.read(), expectedRows, 0.0f, 0.0f, "unpacked");
    }
  }
}

TEST(ElementwiseKernelTest, FillAndBf16) {
  const int64_t n = 4097;
  DeviceArray<float> x(n);
  ASSERT_TRUE(fill(x.get(), 0.5f, n, nullptr).ok());
  expectClose(x.read(), std::vector<float>(n, 0.5f), 0.0f, 0.0f, "fill");

  std::vector<float> values = randomValues(n, 4, 10.0f);
  DeviceArray<float> dx(values);
  DeviceArray<uint16_t> bf16(n);
  ASSERT_TRUE(castToBf16(dx.get(), bf16.get(), n, nullptr).ok());
  std::vector<uint16_t> bits = bf16.read();
  for (int64_t i = 0; i < n; ++i) {
    // Round to nearest even on the top 16 bits of the fp32 pattern.
    uint32_t f;
    std::memcpy(&f, &values[i], sizeof(f));
    uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
    ASSERT_EQ(bits[i], rounded) << "element " << i << " = " << values[i];
  }
}

// The casts agree with the CPU emulation code for code: every value of a
// range wide enough to saturate, with tensorwise scales.
TEST(ElementwiseKernelTest, Fp8CastsMatchTheEmulation) {
  const int64_t rows = 37, cols = 129, n = rows * cols;
  std::vector<float> x = randomValues(n, 5, 3.0f);
  x[7] = 1e-9f;   // below the subnormals once scaled
  x[11] = -0.0f;
  // The transpose pads its rows (37) to 48, as an FP8 GEMM's k must be.
  const int64_t padded = 48;
  DeviceArray<float> dx(x), amax(1), inverse(1);
  DeviceArray<uint8_t> codes(n), transposed(cols * padded);
  ASSERT_TRUE(absMax(dx.get(), n, amax.get(), nullptr).ok());
  float expectedAmax = cpu::absMax(x.data(), n);
  ASSERT_EQ(amax.read()[0], expectedAmax);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    cpu::Fp8Format cpuFormat = format == Fp8Format::E4M3
                                   ? cpu::Fp8Format::E4M3
                                   : cpu::Fp8Format::E5M2;
    SCOPED_TRACE(cpu::fp8FormatName(cpuFormat));
    ASSERT_TRUE(castToFp8(dx.get(), amax.get(), codes.get(), inverse.get(), n,
                          format, nullptr)
                    .ok());
    float scale = cpu::fp8Scale(expectedAmax, cpuFormat);
    std::vector<uint8_t> got = codes.read();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], cpu::encodeFp8(x[i] * scale, cpuFormat)) << i;
    EXPECT_EQ(inverse.read()[0], 1.0f / scale);
    // The values those codes stand for, as the emulation computes them.
    DeviceArray<float> values(n);
    ASSERT_TRUE(roundToFp8(dx.get(), amax.get(), values.get(), n, format,
                           nullptr)
                    .ok());
    std::vector<float> expected(n);
    cpu::quantizeDequantize(x.data(), expected.data(), n, scale, cpuFormat);
    expectClose(values.read(), expected, 0.0f, 0.0f, "rounded");

    ASSERT_TRUE(castTransposeToFp8(dx.get(), amax.get(), transposed.get(),
                                   inverse.get(), rows, cols, padded, format,
                                   nullptr)
                    .ok());
    std::vector<uint8_t> t = transposed.read();
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < padded; ++r)
        ASSERT_EQ(t[c * padded + r], r < rows ? got[r * cols + c] : 0)
            << r << ", " << c;
  }
  // A NaN anywhere makes the amax NaN, as on the CPU.
  x[100] = std::nanf("");
  DeviceArray<float> withNan(x);
  ASSERT_TRUE(absMax(withNan.get(), n, amax.get(), nullptr).ok());
  EXPECT_TRUE(std::isnan(amax.read()[0]));
}

// The packing of collectives around a dimension, there and back.
TEST(ElementwiseKernelTest, InterleaveBlocks) {
  const int64_t outer = 3, parts = 4, chunk = 5;
  std::vector<float> x = randomValues(outer * parts * chunk, 9);
  DeviceArray<float> dx(x), packed(x.size()), back(x.size());
  ASSERT_TRUE(interleaveBlocks(dx.get(), packed.get(), outer, parts, chunk,
                               /*pack=*/true, nullptr)
                  .ok());
  std::vector<float> expected(x.size());
  for (int64_t r = 0; r < parts; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < chunk; ++c)
        expected[(r * outer + o) * chunk + c] = x[(o * parts + r) * chunk + c];
  expectClose(packed.read(), expected, 0.0f, 0.0f, "packed");
  ASSERT_TRUE(interleaveBlocks(packed.get(), back.get(), outer, parts, chunk,
                               /*pack=*/false, nullptr)
                  .ok());
  expectClose(back.read(), x, 0.0f, 0.0f, "unpacked");
}

// Delayed scaling on the device follows cpu::quantizeDelayed's history.
TEST(ElementwiseKernelTest, DelayedScalingHistories) {
  std::vector<float> history = {0.0f, 0.0f, 0.0f};
  std::vector<float> cpuHistory = history;
  std::vector<float> values = {1.0f, -2.0f}, out(2);
  DeviceArray<float> dHistory(history), current(std::vector<float>{2.0f}),
      use(1);
  ASSERT_TRUE(delayedAmax(current.get(), dHistory.get(), 3, use.get(), nullptr)
                  .ok());
  cpu::quantizeDelayed(values.data(), out.data(), 2, cpu::Fp8Format::E4M3,
                       cpuHistory.data(), 3);
  EXPECT_EQ(use.read()[0], 2.0f); // no past: the current amax
  expectClose(dHistory.read(), cpuHistory, 0.0f, 0.0f, "history");
  ASSERT_TRUE(rollAmaxHistories(dHistory.get(), 1, 3, nullptr).ok());
  cpu::rollAmaxHistory(cpuHistory.data(), 3);
  expectClose(dHistory.read(), cpuHistory, 0.0f, 0.0f, "rolled");
  DeviceArray<float> larger(std::vector<float>{8.0f});
  ASSERT_TRUE(delayedAmax(larger.get(), dHistory.get(), 3, use.get(), nullptr)
                  .ok());
  EXPECT_EQ(use.read()[0], 2.0f); // the past, not the current 8
  EXPECT_EQ(dHistory.read()[0], 8.0f);
}

// The helpers of the experts' backward: row dot products (the routing
// weights' gradients), row scaling and scattering per slot.
TEST(ElementwiseKernelTest, RowHelpers) {
  const int64_t rows = 45, width = 300;
  std::vector<float> a = randomValues(rows * width, 6);
  std::vector<float> b = randomValues(rows * width, 7);
  std::vector<float> scales = randomValues(rows, 8);
  DeviceArray<float> da(a), db(b), dscales(scales), dots(rows);
  ASSERT_TRUE(rowDots(da.get(), db.get(), rows, width, dots.get(), nullptr).ok());
  std::vector<float> expected(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i)
      sum += static_cast<double>(a[r * width + i]) * b[r * width + i];
    expected[r] = static_cast<float>(sum);
  }
  expectClose(dots.read(), expected, 1e-6f, 1e-6f, "dots");

  ASSERT_TRUE(scaleRows(da.get(), dscales.get(), rows, width, nullptr).ok());
  std::vector<float> scaled = a;
  for (int64_t i = 0; i < rows * width; ++i)
    scaled[i] *= scales[i / width];
  expectClose(da.read(), scaled, 0.0f, 0.0f, "scaled");

  std::vector<int64_t> slots(rows);
  for (int64_t r = 0; r < rows; ++r)
    slots[r] = (r * 7) % 50;
  std::vector<float> out(50, -1.0f);
  DeviceArray<int64_t> dslots(slots);
  DeviceArray<float> dout(out);
  ASSERT_TRUE(scatterValues(dscales.get(), dslots.get(), rows, dout.get(),
                            nullptr)
                  .ok());
  for (int64_t r = 0; r < rows; ++r)
    out[slots[r]] = scales[r];
  expectClose(dout.read(), out, 0.0f, 0.0f, "scattered");
}

} // namespace
} // namespace moe::rt::cuda
