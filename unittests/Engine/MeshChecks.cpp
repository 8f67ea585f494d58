//===- MeshChecks.cpp - a partitioned step against one-rank kernels -------===//
//
// Expected values come from the whole tensors (cpu::initNormal with the
// element's global index) and the global batch. Sums that the runtime adds
// in double (losses, the norm) are compared to a tolerance; everything else
// must be bitwise: gathers and slices copy, and AllReduce/ReduceScatter add
// the group's values in group-rank order, which the expectations repeat.
//
//===----------------------------------------------------------------------===//

#include "MeshChecks.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/Executor.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

namespace moe::rt::testing {
namespace {

using Sizes = MeshProgramSizes;

/// A whole parameter as every rank of an unpartitioned run would hold it.
std::vector<float> wholeTensor(const Program &program, const char *name,
                               int64_t count, float std) {
  std::vector<float> values(count);
  cpu::initNormal(values.data(), count, std, program.seed, cpu::nameHash(name),
                  /*firstIndex=*/0);
  return values;
}

/// Element-wise equality that reports the first few differences.
void expectBitwise(const float *actual, const std::vector<float> &expected,
                   const char *what) {
  int reported = 0;
  for (size_t i = 0; i < expected.size() && reported < 3; ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "] is " << actual[i] << ", expected "
                    << expected[i];
      ++reported;
    }
}

void expectRelative(double actual, double expected, double tolerance,
                    const char *what) {
  EXPECT_LE(std::abs(actual - expected),
            tolerance * std::max(std::abs(expected), 1e-30))
      << what << " is " << actual << ", expected " << expected;
}

double squaredNorm(const std::vector<float> &values) {
  double sum = 0.0;
  for (float v : values)
    sum += static_cast<double>(v) * v;
  return sum;
}

} // namespace

void checkMeshStep(const MeshConfig &config, comm::World *world) {
  const int64_t dp = config.dp, tp = config.tp;
  const int64_t B = Sizes::kBatch, S = Sizes::kSeq, V = Sizes::kVocab;
  const int64_t K = Sizes::kTopK;
  SCOPED_TRACE(::testing::Message() << "mesh dp=" << dp << " x tp=" << tp);
  Program program = makeMeshProgram(config);
  absl::StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(program, world);
  // Every rank fails or succeeds alike here, so returning early keeps the
  // ranks' collectives in step.
  ASSERT_TRUE(created.ok()) << created.status();
  Executor &executor = **created;
  executor.initialize();

  // Row-major over (dp, tp).
  int64_t rank = world ? world->rank() : 0;
  int64_t dpAt = rank / tp, tpAt = rank % tp;
  EXPECT_EQ(executor.rank(), rank);
  EXPECT_EQ(executor.coordinates(), (std::vector<int64_t>{dpAt, tpAt}));
  BatchBlock rows = executor.batchBlock();
  EXPECT_EQ(rows.index, dpAt * tp + tpAt);
  EXPECT_EQ(rows.count, dp * tp);

  std::vector<float> table = wholeTensor(program, "table", V * V, 1.0f);
  std::vector<float> w = wholeTensor(program, "w", 3 * 4 * dp * 5, 0.5f);
  std::vector<float> v = wholeTensor(program, "v", 2 * dp * tp * 4, 0.5f);
  std::vector<float> x = wholeTensor(program, "x", 2 * dp * 2 * dp * 3, 0.5f);
  uint32_t wBuffer = bufferNamed(program, "w");
  EXPECT_EQ(executor.globalShape(wBuffer),
            (std::vector<int64_t>{3, 4 * dp, 5}));

  // Initialisation: each block holds the whole tensor's values.
  std::vector<float> tableBlock(table.begin() + tpAt * (V / tp) * V,
                                table.begin() + (tpAt + 1) * (V / tp) * V);
  expectBitwise(executor.data(bufferNamed(program, "table")), tableBlock,
                "table block");
  std::vector<float> wBlock;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 5; ++k)
        wBlock.push_back(w[(i * 4 * dp + dpAt * 4 + j) * 5 + k]);
  expectBitwise(executor.data(wBuffer), wBlock, "w block");
  // v is split over {tp, dp}: tp is the outer of the two.
  auto vBlockAt = [&](int64_t block) {
    return std::vector<float>(v.begin() + block * 8,
                              v.begin() + (block + 1) * 8);
  };
  expectBitwise(executor.data(bufferNamed(program, "v")),
                vBlockAt(tpAt * dp + dpAt), "v block");
  int64_t xRows = 2 * dp * 3; // elements per row of x's dimension 0
  std::vector<float> xBlock(x.begin() + dpAt * 2 * xRows,
                            x.begin() + (dpAt + 1) * 2 * xRows);
  expectBitwise(executor.data(bufferNamed(program, "x")), xBlock, "x block");
  // y is split along its first and last dimensions: runs of 2.
  std::vector<float> y = wholeTensor(program, "y", 2 * dp * 3 * 2 * tp, 0.5f);
  std::vector<float> yBlock;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k)
        yBlock.push_back(y[((dpAt * 2 + i) * 3 + j) * 2 * tp + tpAt * 2 + k]);
  expectBitwise(executor.data(bufferNamed(program, "y")), yBlock, "y block");

  // The global batch and this rank's rows of it.
  int64_t globalRows = B * dp * tp;
  std::vector<int32_t> tokens, targets;
  for (int64_t r = 0; r < globalRows; ++r)
    for (int64_t s = 0; s < S; ++s) {
      tokens.push_back(static_cast<int32_t>((r * 7 + s * 3 + 1) % V));
      int32_t target = static_cast<int32_t>((r * 5 + s + 2) % V);
      if ((r == 1 && s == 0) || (r % 3 == 2 && s == 2))
        target = -100; // ignored, on some ranks only
      targets.push_back(target);
    }
  int64_t first = rows.index * B * S;
  absl::StatusOr<StepResult> result = executor.runStep(
      tokens.data() + first, targets.data() + first, /*step=*/0);
  ASSERT_TRUE(result.ok()) << result.status();
  auto temporary = [&](const char *name) {
    return executor.data(bufferNamed(program, name));
  };

  // Gathers, slices and the reductions in group-rank order.
  expectBitwise(temporary("table_full"), table, "table_full");
  expectBitwise(temporary("w_full"), w, "w_full");
  expectBitwise(temporary("w_block"), wBlock, "w_block");
  expectBitwise(temporary("v_full"), v, "v_full");
  std::vector<float> vSum = vBlockAt(tpAt * dp);
  for (int64_t d = 1; d < dp; ++d) {
    std::vector<float> next = vBlockAt(tpAt * dp + d);
    for (size_t i = 0; i < vSum.size(); ++i)
      vSum[i] += next[i];
  }
  expectBitwise(temporary("v_sum"), vSum, "v_sum");
  // ReduceScatter along dimension 1: block dpAt of the sum over dp of the
  // x blocks [2, 2 dp, 3].
  std::vector<float> scattered(2 * 2 * 3);
  for (int64_t d = 0; d < dp; ++d)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t k = 0; k < 3; ++k) {
          float value = x[((d * 2 + i) * 2 * dp + dpAt * 2 + j) * 3 + k];
          float &slot = scattered[(i * 2 + j) * 3 + k];
          slot = d == 0 ? value : slot + value;
        }
  expectBitwise(temporary("x_scattered"), scattered, "x_scattered");

  // Losses over the global batch, as one rank computes them.
  std::vector<float> logits(globalRows * S * V);
  for (int64_t t = 0; t < globalRows * S; ++t)
    std::copy(table.begin() + tokens[t] * V,
              table.begin() + (tokens[t] + 1) * V, logits.begin() + t * V);
  int64_t T = globalRows * S;
  expectRelative(*temporary("ce"),
                 cpu::crossEntropyForward(logits.data(), targets.data(), T, V),
                 1e-6, "ce");
  expectRelative(*temporary("aux"), cpu::auxLossForward(logits.data(), T, V, K),
                 1e-6, "aux");
  std::vector<float> dlogits(T * V), dprobs(T * V);
  cpu::crossEntropyBackward(1.0f, logits.data(), targets.data(), dlogits.data(),
                            T, V);
  cpu::auxLossBackward(1.0f, logits.data(), dprobs.data(), T, V, K);
  int64_t mine = B * S * V;
  expectBitwise(temporary("dlogits"),
                std::vector<float>(dlogits.begin() + rows.index * mine,
                                   dlogits.begin() + (rows.index + 1) * mine),
                "dlogits");
  expectBitwise(temporary("dprobs"),
                std::vector<float>(dprobs.begin() + rows.index * mine,
                                   dprobs.begin() + (rows.index + 1) * mine),
                "dprobs");

  // The norm of the whole parameters (u is 5 ones, on every rank).
  double squares = squaredNorm(w) + squaredNorm(v) + squaredNorm(table) +
                   squaredNorm(x) + squaredNorm(y) + 5.0;
  expectRelative(result->gradNorm, std::sqrt(squares), 1e-6, "grad_norm");

  // Replicated scalars are bitwise the same on every rank.
  if (world && world->size() > 1) {
    absl::StatusOr<std::unique_ptr<comm::Group>> everyone =
        world->group(comm::Mesh{{"dp", "tp"}, {dp, tp}}, {"dp", "tp"});
    ASSERT_TRUE(everyone.ok()) << everyone.status();
    std::vector<float> mineScalars = {result->loss, result->gradNorm,
                                      result->lr};
    std::vector<float> all(3 * world->size());
    ASSERT_TRUE((*everyone)->allGather(mineScalars, absl::MakeSpan(all)).ok());
    for (int r = 1; r < world->size(); ++r)
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(std::memcmp(&all[3 * r + i], &all[i], sizeof(float)), 0)
            << "scalar " << i << " of rank " << r << " differs from rank 0";
  }
}

} // namespace moe::rt::testing
