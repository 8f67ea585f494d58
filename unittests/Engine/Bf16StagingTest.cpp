//===- Bf16StagingTest.cpp - BF16 kernels are RNE of the fp32 kernels ----===//
//
// Mixed precision on the CPU (docs/precision.md): an instruction on BF16
// buffers decodes its operands exactly, runs the fp32 kernel and rounds each
// BF16 result once to nearest even. Each test runs one instruction twice,
// on BF16 buffers and on fp32 buffers holding the same (BF16-representable)
// values, and requires every BF16 result to be bit for bit the RNE of the
// fp32 one, and every fp32 result (lse, losses) to be equal.
//
//===----------------------------------------------------------------------===//

#include "Dispatch.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/IO/Float16.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace moe::rt {
namespace {

struct Case {
  Program program;
  /// Buffers the instruction reads, filled with random values; ids get
  /// values in [0, idRange).
  std::vector<uint32_t> inputs;
  int64_t idRange = 1;

  uint32_t add(std::vector<int64_t> shape, DType dtype) {
    Buffer b;
    b.name = "b" + std::to_string(program.buffers.size());
    b.kind = BufferKind::Temporary;
    b.dtype = dtype;
    b.shape = std::move(shape);
    program.buffers.push_back(b);
    return program.buffers.size() - 1;
  }
  void emit(const ops::EncodedAttrs &attrs, std::vector<uint32_t> operands,
            std::vector<uint32_t> results) {
    Instruction inst;
    inst.opcode = attrs.opcode;
    inst.operands = std::move(operands);
    inst.results = std::move(results);
    inst.intAttrs = attrs.ints;
    inst.floatAttrs = attrs.floats;
    program.instructions.push_back(inst);
  }
};

/// Runs instruction 0 of `program` on `values` (fp32 values per buffer,
/// ids as floats) and returns each buffer's contents after it, as fp32.
std::vector<std::vector<float>> run(const Program &program,
                                    const std::vector<std::vector<float>> &values) {
  std::vector<std::vector<uint8_t>> storage(program.buffers.size());
  std::vector<uint8_t *> pointers(program.buffers.size());
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    int64_t n = buffer.numElements();
    storage[b].assign(n * 4 + 64, 0);
    pointers[b] = storage[b].data();
    for (int64_t i = 0; i < n; ++i) {
      float v = values[b][i];
      if (buffer.dtype == DType::BF16) {
        uint16_t bits = io::floatToBf16(v);
        std::memcpy(pointers[b] + 2 * i, &bits, 2);
      } else if (buffer.dtype == DType::I32) {
        int32_t id = static_cast<int32_t>(v);
        std::memcpy(pointers[b] + 4 * i, &id, 4);
      } else {
        std::memcpy(pointers[b] + 4 * i, &v, 4);
      }
    }
  }
  std::vector<float> pack;
  std::vector<std::unique_ptr<comm::Group>> groups;
  engine::StepContext context{program, pointers, groups, pack};
  absl::Status status = engine::runInstruction(context, 0);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<std::vector<float>> out(program.buffers.size());
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer &buffer = program.buffers[b];
    for (int64_t i = 0; i < buffer.numElements(); ++i) {
      float v;
      if (buffer.dtype == DType::BF16) {
        uint16_t bits;
        std::memcpy(&bits, pointers[b] + 2 * i, 2);
        v = io::bf16ToFloat(bits);
      } else if (buffer.dtype == DType::I32) {
        int32_t id;
        std::memcpy(&id, pointers[b] + 4 * i, 4);
        v = static_cast<float>(id);
      } else {
        std::memcpy(&v, pointers[b] + 4 * i, 4);
      }
      out[b].push_back(v);
    }
  }
  return out;
}

/// Random values for every buffer of `c`: BF16-representable, so that a
/// run on BF16 buffers and one on fp32 buffers see the same operands.
std::vector<std::vector<float>> randomValues(const Case &c) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> values(c.program.buffers.size());
  for (size_t b = 0; b < c.program.buffers.size(); ++b) {
    const Buffer &buffer = c.program.buffers[b];
    values[b].assign(buffer.numElements(), 0.0f);
    for (float &v : values[b]) {
      if (buffer.dtype == DType::I32)
        v = static_cast<float>(rng() % c.idRange);
      else
        v = io::bf16ToFloat(io::floatToBf16(normal(rng)));
    }
  }
  return values;
}

/// Requires every result of instruction 0 of `c` run on its BF16 buffers to
/// be bit for bit `reference`'s, rounded to BF16 where the result is BF16.
void expectResultsAreRounded(const Case &c,
                             const std::vector<std::vector<float>> &staged,
                             const std::vector<std::vector<float>> &reference) {
  for (uint32_t r : c.program.instructions[0].results) {
    SCOPED_TRACE(testing::Message() << "result buffer " << r);
    bool bf16 = c.program.buffers[r].dtype == DType::BF16;
    for (size_t i = 0; i < staged[r].size(); ++i) {
      float expected = bf16 ? io::bf16ToFloat(io::floatToBf16(reference[r][i]))
                            : reference[r][i];
      ASSERT_EQ(std::memcmp(&staged[r][i], &expected, 4), 0)
          << "element " << i << ": " << staged[r][i] << " vs " << expected;
    }
  }
}

void expectStagedIsRoundedFp32(const Case &c) {
  std::vector<std::vector<float>> values = randomValues(c);
  Program fp32 = c.program;
  for (Buffer &buffer : fp32.buffers)
    if (buffer.dtype == DType::BF16)
      buffer.dtype = DType::F32;
  std::vector<std::vector<float>> staged = run(c.program, values);
  std::vector<std::vector<float>> reference = run(fp32, values);
  expectResultsAreRounded(c, staged, reference);
}

constexpr DType BF = DType::BF16, F = DType::F32, I = DType::I32;

TEST(Bf16StagingTest, Linear) {
  Case c;
  uint32_t x = c.add({2, 3, 16}, BF), w = c.add({8, 16}, BF),
           y = c.add({2, 3, 8}, BF);
  c.emit(ops::buildLinear(), {x, w}, {y});
  expectStagedIsRoundedFp32(c);
}

TEST(Bf16StagingTest, LinearGradWeightToFp32) {
  Case c;
  uint32_t dy = c.add({6, 8}, BF), x = c.add({6, 16}, BF),
           dw = c.add({8, 16}, F);
  c.emit(ops::buildLinearGradWeight(), {dy, x}, {dw});
  expectStagedIsRoundedFp32(c);
}

TEST(Bf16StagingTest, RmsNormAndItsGradient) {
  Case c;
  uint32_t x = c.add({4, 16}, BF), w = c.add({16}, BF), y = c.add({4, 16}, BF);
  c.emit(ops::buildRmsNorm(1e-5f), {x, w}, {y});
  expectStagedIsRoundedFp32(c);
  Case g;
  uint32_t dy = g.add({4, 16}, BF), gx = g.add({4, 16}, BF),
           gw = g.add({16}, BF), dx = g.add({4, 16}, BF), dw = g.add({16}, F);
  g.emit(ops::buildRmsNormGrad(1e-5f), {dy, gx, gw}, {dx, dw});
  expectStagedIsRoundedFp32(g);
}

TEST(Bf16StagingTest, Swiglu) {
  Case c;
  uint32_t gate = c.add({4, 16}, BF), up = c.add({4, 16}, BF),
           y = c.add({4, 16}, BF);
  c.emit(ops::buildSwiglu(), {gate, up}, {y});
  expectStagedIsRoundedFp32(c);
}

TEST(Bf16StagingTest, Embedding) {
  Case c;
  c.idRange = 10;
  uint32_t tokens = c.add({2, 3}, I), table = c.add({10, 8}, BF),
           y = c.add({2, 3, 8}, BF);
  c.emit(ops::buildEmbedding(), {tokens, table}, {y});
  expectStagedIsRoundedFp32(c);
}

TEST(Bf16StagingTest, Attention) {
  Case c;
  uint32_t q = c.add({1, 4, 16}, BF), k = c.add({1, 4, 8}, BF),
           v = c.add({1, 4, 8}, BF), out = c.add({1, 4, 16}, BF),
           lse = c.add({1, 2, 4}, F);
  c.emit(ops::buildAttention(2, 1, std::nullopt, std::nullopt), {q, k, v}, {out, lse});
  expectStagedIsRoundedFp32(c);
}

TEST(Bf16StagingTest, CrossEntropyLossStaysFp32) {
  Case c;
  c.idRange = 12;
  uint32_t logits = c.add({2, 3, 12}, BF), targets = c.add({2, 3}, I),
           loss = c.add({}, F);
  c.emit(ops::buildCrossEntropy(std::nullopt), {logits, targets}, {loss});
  expectStagedIsRoundedFp32(c);
}

// The experts also round each assignment's expert output (backward, its
// input gradient) to BF16 before adding a token's assignments, as the rows
// an expert all-to-all brings back are BF16 (Kernels.h, bf16Rows): the
// staged run is the fp32 kernel with bf16Rows, its BF16 results rounded
// once. Two slots per token, so that the per-assignment rounding shows.
struct ExpertsCase : Case {
  uint32_t x = add({4, 8}, BF), weights = add({4, 2}, F),
           indices = add({4, 2}, I), w1 = add({3, 16, 8}, BF),
           w3 = add({3, 16, 8}, BF), w2 = add({3, 8, 16}, BF);
  ExpertsCase() { idRange = 3; }
};

TEST(Bf16StagingTest, ExpertsRoundEachAssignmentsOutput) {
  ExpertsCase c;
  uint32_t y = c.add({4, 8}, BF);
  c.emit(ops::buildExperts(std::nullopt, std::nullopt),
         {c.x, c.weights, c.indices, c.w1, c.w3, c.w2}, {y});
  std::vector<std::vector<float>> values = randomValues(c);
  std::vector<std::vector<float>> reference = values;
  std::vector<int32_t> ids(values[c.indices].begin(), values[c.indices].end());
  cpu::expertsForward(values[c.x].data(), values[c.weights].data(), ids.data(),
                      values[c.w1].data(), values[c.w3].data(),
                      values[c.w2].data(), reference[y].data(), 4, 8, 16, 3, 2,
                      /*fp8=*/nullptr, /*bf16Rows=*/true);
  std::vector<float> unrounded(32);
  cpu::expertsForward(values[c.x].data(), values[c.weights].data(), ids.data(),
                      values[c.w1].data(), values[c.w3].data(),
                      values[c.w2].data(), unrounded.data(), 4, 8, 16, 3, 2);
  ASSERT_NE(reference[y], unrounded) << "the rounding must show";
  expectResultsAreRounded(c, run(c.program, values), reference);
}

TEST(Bf16StagingTest, ExpertsGradRoundEachAssignmentsInputGradient) {
  ExpertsCase c;
  uint32_t dy = c.add({4, 8}, BF), dx = c.add({4, 8}, BF),
           dweights = c.add({4, 2}, F), dw1 = c.add({3, 16, 8}, F),
           dw3 = c.add({3, 16, 8}, F), dw2 = c.add({3, 8, 16}, F);
  c.emit(ops::buildExpertsGrad(std::nullopt, std::nullopt),
         {dy, c.x, c.weights, c.indices, c.w1, c.w3, c.w2},
         {dx, dweights, dw1, dw3, dw2});
  std::vector<std::vector<float>> values = randomValues(c);
  std::vector<std::vector<float>> reference = values;
  std::vector<int32_t> ids(values[c.indices].begin(), values[c.indices].end());
  cpu::expertsBackward(values[dy].data(), values[c.x].data(),
                       values[c.weights].data(), ids.data(),
                       values[c.w1].data(), values[c.w3].data(),
                       values[c.w2].data(), reference[dx].data(),
                       reference[dweights].data(), reference[dw1].data(),
                       reference[dw3].data(), reference[dw2].data(), 4, 8, 16,
                       3, 2, /*fp8=*/nullptr, /*bf16Rows=*/true);
  expectResultsAreRounded(c, run(c.program, values), reference);
}

} // namespace
} // namespace moe::rt
