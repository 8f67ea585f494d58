//===- ExpertParallelChecks.cpp - expert parallelism against one rank -----===//
//
// The reference is cpu::expertsForward/expertsBackward on the tokens of one
// {ep} group, gathered in group-rank order, with every expert (the whole
// tensors from cpu::initNormal). The comparisons are bitwise: each expert
// of the parallel run multiplies the same rows in the same order as the
// reference (the group's tokens in rank order), in GEMMs of the same
// shapes, and each token adds its experts in global expert order, as the
// kernels do. On a group of one the check is exactly "the expert-parallel
// path equals the plain kernels". With BF16 x, y, dy and dx, the rows
// travel as BF16 both ways and the reference is the kernels with bf16Rows,
// their y and dx rounded once, as staging rounds them.
//
//===----------------------------------------------------------------------===//

#include "ExpertParallelChecks.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/Executor.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

namespace moe::rt::testing {
namespace {

using Sizes = ExpertParallelSizes;
constexpr int64_t B = Sizes::kBatch, S = Sizes::kSeq, V = Sizes::kVocab;
constexpr int64_t H = Sizes::kHidden, F = Sizes::kFfn;
constexpr int64_t T = B * S; // tokens per rank

std::vector<float> wholeTensor(const Program &program, const char *name,
                               int64_t count, float std) {
  std::vector<float> values(count);
  cpu::initNormal(values.data(), count, std, program.seed, cpu::nameHash(name),
                  /*firstIndex=*/0);
  return values;
}

void expectBitwise(const float *actual, const float *expected, int64_t count,
                   const char *what) {
  int reported = 0;
  for (int64_t i = 0; i < count && reported < 3; ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "] is " << actual[i] << ", expected "
                    << expected[i];
      ++reported;
    }
}

/// The global batch: rows in rank order, targets < H (they index y's last
/// dimension), a few ignored.
struct GlobalBatch {
  std::vector<int32_t> tokens, targets;
};

GlobalBatch makeBatch(int64_t ranks) {
  GlobalBatch batch;
  for (int64_t t = 0; t < ranks * T; ++t) {
    batch.tokens.push_back(static_cast<int32_t>((t * 7 + t / 3 + 2) % V));
    batch.targets.push_back(t % 4 == 3 ? -100
                                       : static_cast<int32_t>((t * 5 + 1) % H));
  }
  return batch;
}

/// Every rank's copy of a buffer, concatenated in world-rank order (this
/// rank's own without a world of several).
class Gatherer {
public:
  Gatherer(const ExpertParallelConfig &config, comm::World *world) {
    if (!world || world->size() == 1)
      return;
    absl::StatusOr<std::unique_ptr<comm::Group>> group = world->group(
        comm::Mesh{{"dp", "ep"}, {config.dp, config.ep}}, {"dp", "ep"});
    EXPECT_TRUE(group.ok()) << group.status();
    if (group.ok())
      everyone = std::move(*group);
  }

  template <typename T>
  std::vector<T> gather(const T *mine, int64_t count) const {
    if (!everyone)
      return std::vector<T>(mine, mine + count);
    std::vector<T> all(count * everyone->size());
    absl::Status status = everyone->allGather(absl::MakeConstSpan(mine, count),
                                              absl::MakeSpan(all));
    EXPECT_TRUE(status.ok()) << status;
    return all;
  }

private:
  std::unique_ptr<comm::Group> everyone;
};

/// The single-rank kernels on the tokens of one {ep} group.
struct Reference {
  std::vector<float> y, dx, dweights, dw1, dw3, dw2;
};

struct WholeExperts {
  std::vector<float> w1, w3, w2;
  int64_t experts;
};

Reference referenceOf(const WholeExperts &whole, int64_t tokens, int64_t topK,
                      const float *x, const float *weights, const int32_t *ids,
                      const float *dy, bool bf16) {
  int64_t E = whole.experts;
  Reference r;
  r.y.resize(tokens * H);
  r.dx.resize(tokens * H);
  r.dweights.resize(tokens * topK);
  r.dw1.resize(E * F * H);
  r.dw3.resize(E * F * H);
  r.dw2.resize(E * H * F);
  cpu::expertsForward(x, weights, ids, whole.w1.data(), whole.w3.data(),
                      whole.w2.data(), r.y.data(), tokens, H, F, E, topK,
                      /*fp8=*/nullptr, bf16);
  cpu::expertsBackward(dy, x, weights, ids, whole.w1.data(), whole.w3.data(),
                       whole.w2.data(), r.dx.data(), r.dweights.data(),
                       r.dw1.data(), r.dw3.data(), r.dw2.data(), tokens, H, F,
                       E, topK, /*fp8=*/nullptr, bf16);
  if (bf16) {
    cpu::roundToBf16(r.y.data(), tokens * H);
    cpu::roundToBf16(r.dx.data(), tokens * H);
  }
  return r;
}

/// The buffers a step leaves for the checks, copied out of the arena (BF16
/// ones decoded).
std::vector<float> copyOf(const Executor &executor, const char *name) {
  uint32_t b = bufferNamed(executor.program(), name);
  const Buffer &buffer = executor.program().buffers[b];
  std::vector<float> values(buffer.numElements());
  if (buffer.dtype == DType::BF16)
    cpu::castFromBf16(reinterpret_cast<const uint16_t *>(executor.bytes(b)),
                      values.data(), buffer.numElements());
  else
    std::memcpy(values.data(), executor.data(b),
                values.size() * sizeof(float));
  return values;
}

const char *const kResults[] = {"y",         "dx",        "dweights",
                                "dw1",       "dw3",       "dw2",
                                "dw1_total", "dw3_total", "dw2_total"};

} // namespace

void checkExpertParallelStep(const ExpertParallelConfig &config,
                             comm::World *world) {
  const int64_t dp = config.dp, ep = config.ep, K = config.topK;
  const int64_t El = config.localExperts, E = El * ep;
  SCOPED_TRACE(::testing::Message()
               << "mesh dp=" << dp << " x ep=" << ep << ", " << El
               << " experts per rank, top-" << K << ", capacity factor "
               << config.capacityFactor << (config.bf16 ? ", BF16" : ""));
  Program program = makeExpertParallelProgram(config);
  absl::StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(program, world);
  // Every rank fails or succeeds alike here, so returning early keeps the
  // ranks' collectives in step.
  ASSERT_TRUE(created.ok()) << created.status();
  Executor &executor = **created;
  executor.initialize();
  int64_t rank = world ? world->rank() : 0;
  int64_t dpAt = rank / ep, epAt = rank % ep;
  ASSERT_EQ(executor.batchBlock().index, rank);

  WholeExperts whole{wholeTensor(program, "experts.{e}.w1", E * F * H, 0.5f),
                     wholeTensor(program, "experts.{e}.w3", E * F * H, 0.5f),
                     wholeTensor(program, "experts.{e}.w2", E * H * F, 0.5f),
                     E};
  // This rank holds experts [epAt * El, (epAt + 1) * El).
  int64_t block = El * F * H;
  expectBitwise(executor.data(bufferNamed(program, "experts.{e}.w1")),
                whole.w1.data() + epAt * block, block, "w1 block");

  GlobalBatch batch = makeBatch(dp * ep);
  absl::StatusOr<StepResult> result = executor.runStep(
      batch.tokens.data() + rank * T, batch.targets.data() + rank * T, 0);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<std::vector<float>> first;
  for (const char *name : kResults)
    first.push_back(copyOf(executor, name));

  // Every rank's routing, as its Router computed it.
  Gatherer gatherer(config, world);
  auto gatherF = [&](const char *name, int64_t width) {
    return gatherer.gather(copyOf(executor, name).data(), T * width);
  };
  std::vector<float> x = gatherF("x", H), weights = gatherF("weights", K);
  std::vector<float> dy = gatherF("dy", H);
  std::vector<int32_t> ids =
      gatherer.gather(executor.ids(bufferNamed(program, "ids")), T * K);
  if (config.capacityFactor > 0) {
    EXPECT_THAT(ids, ::testing::Contains(-1)) << "no slot was dropped";
  }

  // One reference per {ep} group: world ranks [d * ep, (d + 1) * ep).
  int64_t groupTokens = ep * T;
  std::vector<Reference> references;
  for (int64_t d = 0; d < dp; ++d) {
    int64_t t0 = d * groupTokens;
    references.push_back(referenceOf(whole, groupTokens, K, &x[t0 * H],
                                     &weights[t0 * K], &ids[t0 * K],
                                     &dy[t0 * H], config.bf16));
  }
  const Reference &mine = references[dpAt];
  int64_t row = epAt * T; // this rank's first token in its group
  expectBitwise(first[0].data(), &mine.y[row * H], T * H, "y");
  expectBitwise(first[1].data(), &mine.dx[row * H], T * H, "dx");
  expectBitwise(first[2].data(), &mine.dweights[row * K], T * K, "dweights");
  // The local experts' gradients over the group's tokens ...
  expectBitwise(first[3].data(), &mine.dw1[epAt * block], block, "dw1");
  expectBitwise(first[4].data(), &mine.dw3[epAt * block], block, "dw3");
  expectBitwise(first[5].data(), &mine.dw2[epAt * block], block, "dw2");
  // ... and over every token once summed over {dp}, in dp order as
  // AllReduce adds.
  std::vector<float> dw1(block), dw3(block), dw2(block);
  for (int64_t d = 0; d < dp; ++d)
    for (int64_t i = 0; i < block; ++i) {
      int64_t at = epAt * block + i;
      const Reference &r = references[d];
      dw1[i] = d == 0 ? r.dw1[at] : dw1[i] + r.dw1[at];
      dw3[i] = d == 0 ? r.dw3[at] : dw3[i] + r.dw3[at];
      dw2[i] = d == 0 ? r.dw2[at] : dw2[i] + r.dw2[at];
    }
  expectBitwise(first[6].data(), dw1.data(), block, "dw1_total");
  expectBitwise(first[7].data(), dw3.data(), block, "dw3_total");
  expectBitwise(first[8].data(), dw2.data(), block, "dw2_total");

  // The loss over every rank's y.
  std::vector<float> y;
  for (const Reference &r : references)
    y.insert(y.end(), r.y.begin(), r.y.end());
  float ce =
      cpu::crossEntropyForward(y.data(), batch.targets.data(), dp * ep * T, H);
  EXPECT_LE(std::abs(result->loss - ce), 1e-6 * std::abs(ce))
      << "loss is " << result->loss << ", expected " << ce;

  // The same inputs again: bitwise the same results.
  result = executor.runStep(batch.tokens.data() + rank * T,
                            batch.targets.data() + rank * T, 1);
  ASSERT_TRUE(result.ok()) << result.status();
  for (size_t i = 0; i < first.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "second step, " << kResults[i]);
    std::vector<float> again = copyOf(executor, kResults[i]);
    expectBitwise(again.data(), first[i].data(),
                  static_cast<int64_t>(first[i].size()), kResults[i]);
  }
}

void checkExpertParallelBadIds(const ExpertParallelConfig &config,
                               comm::World *world) {
  const int64_t ep = config.ep, K = config.topK;
  const int64_t E = config.localExperts * ep;
  Program program = makeExpertParallelProgram(config);
  absl::StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(program, world);
  ASSERT_TRUE(created.ok()) << created.status();
  Executor &executor = **created;
  executor.initialize();
  int64_t rank = world ? world->rank() : 0;
  bool culprit = rank % ep == ep - 1;
  uint32_t ids = bufferNamed(program, "ids");
  GlobalBatch batch = makeBatch(config.dp * ep);
  const int32_t *tokens = batch.tokens.data() + rank * T;
  const int32_t *targets = batch.targets.data() + rank * T;

  for (Opcode opcode : {Opcode::Experts, Opcode::ExpertsGrad}) {
    SCOPED_TRACE(opcodeName(opcode));
    int32_t bad = opcode == Opcode::Experts ? static_cast<int32_t>(E) : -2;
    StepHooks hooks;
    hooks.beforeInstruction = [&](size_t, const Instruction &instruction) {
      // Token 6 (batch 1, seq 1), slot 1.
      if (culprit && instruction.opcode == opcode)
        executor.ids(ids)[6 * K + 1] = bad;
    };
    absl::StatusOr<StepResult> result =
        executor.runStep(tokens, targets, 0, hooks);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    size_t index = instructionWith(program, opcode);
    std::string where =
        absl::StrCat("step 1: instruction ", index, " (", opcodeName(opcode),
                     ") at tiny.mlir:", index + 1, ": ");
    std::string expected =
        culprit ? absl::StrCat(where, "expert id ", bad,
                               " at token 6 (batch 1, seq 1), slot 1 is "
                               "outside [-1, ",
                               E, ")")
                : absl::StrCat(where, "group rank ", ep - 1,
                               " of {ep} of dp=", config.dp, " x ep=", ep,
                               " has an expert id outside [-1, ", E, ")");
    EXPECT_EQ(result.status().message(), expected);
  }
  // Every rank stopped at the same instruction, so the next step is clean.
  absl::StatusOr<StepResult> result = executor.runStep(tokens, targets, 1);
  EXPECT_TRUE(result.ok()) << result.status();
}

} // namespace moe::rt::testing

namespace moe::rt::testing {

void checkFp8AmaxHistoryCopies(const ExpertParallelConfig &config,
                               comm::World *world) {
  const int64_t dp = config.dp, ep = config.ep, El = config.localExperts;
  constexpr int64_t kLength = 4;
  SCOPED_TRACE(::testing::Message() << "delayed fp8, mesh dp=" << dp
                                    << " x ep=" << ep);
  Program program = makeExpertParallelProgram(config);
  ProgramBuilder b(program);
  uint32_t history = b.state("experts.fp8_amax_history",
                             {El, cpu::kFp8ExpertRoles, kLength},
                             {{"ep"}, {}, {}});
  for (Instruction &inst : program.instructions)
    if (inst.opcode == Opcode::Experts || inst.opcode == Opcode::ExpertsGrad) {
      // After the group: delayed scaling, block 128, no FP8 dispatch.
      inst.intAttrs.insert(inst.intAttrs.end(), {3, 128, 0});
      inst.operands.push_back(history);
    }
  // Ranks that differ only on dp hold copies of the same experts' history.
  std::vector<int64_t> group;
  if (dp > 1)
    group.push_back(b.group({"dp"}));
  b.emit(Opcode::Fp8AmaxUpdate, {history}, {}, group);
  absl::StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(program, world);
  ASSERT_TRUE(created.ok()) << created.status();
  Executor &executor = **created;
  executor.initialize();
  int64_t rank = world ? world->rank() : 0;
  GlobalBatch batch = makeBatch(dp * ep);
  for (int64_t step = 0; step < 2; ++step) {
    absl::StatusOr<StepResult> result = executor.runStep(
        batch.tokens.data() + rank * T, batch.targets.data() + rank * T, step);
    ASSERT_TRUE(result.ok()) << result.status();
  }

  // Each rank's tokens differ, so before the update its amaxes did too;
  // after it the copies agree bitwise, hold two steps' amaxes, and [0] is
  // cleared for the next step.
  int64_t count = program.buffers[history].numElements();
  std::vector<float> all =
      Gatherer(config, world).gather(executor.data(history), count);
  int64_t epAt = rank % ep;
  for (int64_t other = 0; other < dp * ep; ++other) {
    if (other % ep != epAt)
      continue;
    expectBitwise(&all[other * count], executor.data(history), count,
                  "amax history copy");
  }
  // An expert that no token reached records nothing; the ones that did
  // record every GEMM input.
  int64_t recorded = 0;
  for (int64_t row = 0; row < dp * ep * El * cpu::kFp8ExpertRoles; ++row) {
    const float *amaxes = all.data() + row * kLength;
    EXPECT_EQ(amaxes[0], 0.0f) << "row " << row;
    EXPECT_EQ(amaxes[3], 0.0f) << "row " << row;
    recorded += amaxes[1] > 0.0f && amaxes[2] > 0.0f;
  }
  EXPECT_GT(recorded, 0);
}

} // namespace moe::rt::testing
