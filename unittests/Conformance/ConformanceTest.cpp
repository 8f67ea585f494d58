//===- ConformanceTest.cpp - every opcode on every backend ----------------===//
//
// Run against every registered backend (backendNames()):
// - On a backend whose step the host can observe (the CPU reference), the
//   programs of programsFor run two steps from weights and batches drawn
//   afresh for each program, step and rank from one fixed seed (printed
//   with any failure, so that a failure reproduces and nothing flakes).
//   Every instruction has its results poisoned before it runs and checked
//   after: each element must have been written. A result that shares
//   memory with an operand is allowed only where the op table marks the
//   opcode in-place; it cannot be poisoned, and the output says so. The
//   collectives, the FP8 amax update and AdamW (whose results are its
//   operands) are checked against their definitions. Every opcode of the
//   generated op table (ops::kOpTable) must be run and have a result
//   checked (or be checked against its definition): a new opcode fails
//   here until a program below covers it.
//   The binary is an MPI program: under ctest a world of one, where the
//   mesh programs' groups have one rank; test/moe-run/conformance-ranks.test
//   runs it on 2 and 4 ranks, where the collectives' definitions are
//   checked over real groups (AllReduce = the sum of the ranks' operands).
// - On a device backend, the programs of one rank run two steps on it and
//   on the CPU from the same weights and batches, instruction by
//   instruction through the Backend interface (step hooks, readBuffer,
//   writeBuffer, fillBuffer): each device instruction starts from the
//   CPU's operands, has its results poisoned, and must write every element
//   and match the CPU's results (integers exactly, floats within the BF16
//   GEMMs' 2^-6 of the result's magnitude; router near-ties excepted, see
//   checkInstructionsAgainstCpu). The op table's coverage is checked there
//   too. Without the device (or without the backend's module) the test is
//   skipped, saying why. With MOE_VIRTUAL_GPU=NAME (a100, h100, h200) the
//   cuda backend is the virtual GPU's module (lib/Runtime/VirtualGpu).
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Artifact/ExpertsRecipe.h"
#include "moe/Runtime/Artifact/OpTable.h"
#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Backend/Backend.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/IO/Float16.h"

#include "TestProgram.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace moe::rt;

namespace {

/// Every draw of the suite derives from this seed. It is fixed, so that
/// the suite cannot flake, and printed with every failure;
/// MOE_CONFORMANCE_SEED=N runs the suite from another (main() sets it).
uint64_t suiteSeed = 0x5eed15;

/// Bit patterns no kernel writes by chance: a NaN with a payload, and an
/// id far outside every vocabulary and expert count.
constexpr uint32_t kPoisonBits = 0x7fc0dead;
constexpr uint16_t kPoisonBf16Bits = 0x7fad;
constexpr int32_t kPoisonId = 0x7eadbeef;

/// The job's processes: one under ctest, each rank of an mpirun under
/// test/moe-run/conformance-ranks.test.
comm::World *world = nullptr;

/// The tiny program with its final norm again after the update, as a
/// per-head norm of one head (the model programs have no QK-norm).
Program makeHeadNormProgram() {
  using namespace moe::rt::testing;
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  uint32_t h = bufferNamed(program, "h"), dn = bufferNamed(program, "dn");
  uint32_t w = bufferNamed(program, "model.norm.weight");
  const std::vector<int64_t> &shape = program.buffers[h].shape;
  uint32_t y = b.temporary("head_norm", shape);
  uint32_t dx = b.temporary("dhead_norm", shape);
  uint32_t dw = b.temporary("dhead_norm.weight", program.buffers[w].shape);
  b.emit(Opcode::HeadRmsNorm, {h, w}, {y}, {/*heads=*/1}, {1e-5f});
  b.emit(Opcode::HeadRmsNormGrad, {dn, h, w}, {dx, dw}, {1}, {1e-5f});
  return program;
}

/// The scored router's program with DeepSeek-V3's sequence-wise balance
/// loss on its scores and selection and the router z-loss on its logits,
/// and their gradients, after the update.
Program makeRouterLossesProgram() {
  using namespace moe::rt::testing;
  Program program = makeScoredRouterProgram();
  ProgramBuilder b(program);
  uint32_t logits = bufferNamed(program, "router_logits");
  uint32_t scores = bufferNamed(program, "scores");
  uint32_t ids = bufferNamed(program, "scored_ids");
  uint32_t dloss = bufferNamed(program, "daux");
  const std::vector<int64_t> &shape = program.buffers[logits].shape;
  uint32_t sequenceAux = b.temporary("seq_aux", {});
  uint32_t zLoss = b.temporary("z_loss", {});
  uint32_t dscores = b.temporary("dscores.seq_aux", shape);
  uint32_t dlogits = b.temporary("dlogits.z_loss", shape);
  // ints: batch_group, sequence_group (-1: none).
  b.emit(Opcode::SequenceAuxLoss, {scores, ids}, {sequenceAux}, {-1, -1});
  b.emit(Opcode::ZLoss, {logits}, {zLoss});
  b.emit(Opcode::SequenceAuxLossGrad, {dloss, scores, ids}, {dscores},
         {-1, -1});
  b.emit(Opcode::ZLossGrad, {dloss, logits}, {dlogits});
  return program;
}

/// The tiny program with multi-head latent attention's pieces after the
/// update, on its activations h [B, S, 4] as two heads of 2: h split per
/// head (1 + 1) and with its second parts summed over the heads (shared),
/// both joined again, and attention whose values (the first parts) are
/// one wide where the queries and keys are two.
Program makeLatentAttentionProgram() {
  using namespace moe::rt::testing;
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  uint32_t h = bufferNamed(program, "h");
  const std::vector<int64_t> &shape = program.buffers[h].shape;
  int64_t B = shape[0], S = shape[1], width = shape[2];
  const int64_t heads = 2, part = width / heads / 2;
  auto tensor = [&](const char *name, int64_t last) {
    return b.temporary(name, {B, S, last});
  };
  uint32_t first = tensor("h.first", heads * part);
  uint32_t second = tensor("h.second", heads * part);
  uint32_t firstAgain = tensor("h.first.again", heads * part);
  uint32_t shared = tensor("h.second.summed", part);
  uint32_t joined = tensor("h.joined", width);
  uint32_t sharedJoined = tensor("h.joined.shared", width);
  b.emit(Opcode::SplitHeads, {h}, {first, second}, {heads});
  b.emit(Opcode::SplitHeads, {h}, {firstAgain, shared}, {heads});
  b.emit(Opcode::ConcatHeads, {first, second}, {joined}, {heads});
  b.emit(Opcode::ConcatHeads, {firstAgain, shared}, {sharedJoined}, {heads});
  uint32_t out = tensor("mla.out", heads * part);
  uint32_t lse = b.temporary("mla.lse", {B, heads, S});
  uint32_t dq = tensor("mla.dq", width), dk = tensor("mla.dk", width);
  uint32_t dv = tensor("mla.dv", heads * part);
  b.emit(Opcode::AttentionValueDim, {h, joined, first}, {out, lse},
         {heads, heads});
  b.emit(Opcode::AttentionValueDimGrad, {second, h, joined, first, out, lse},
         {dq, dk, dv}, {heads, heads});
  return program;
}

/// The tiny program with a SwiGLU and its gradient after the update, on
/// the step's activations (the experts' kernels compute their own SwiGLU,
/// so no model program has the standalone opcodes).
Program makeSwigluProgram() {
  using namespace moe::rt::testing;
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  uint32_t gate = bufferNamed(program, "h"), up = bufferNamed(program, "n");
  uint32_t dy = bufferNamed(program, "dn");
  const std::vector<int64_t> &shape = program.buffers[gate].shape;
  uint32_t y = b.temporary("swiglu", shape);
  uint32_t dgate = b.temporary("dgate", shape);
  uint32_t dup = b.temporary("dup", shape);
  b.emit(Opcode::Swiglu, {gate, up}, {y});
  b.emit(Opcode::SwigluGrad, {dy, gate, up}, {dgate, dup});
  return program;
}

/// The tiny program with the LM head's GEMMs again, each adding its product
/// to an addend (moe-fuse-gemm-epilogues' forms), after the update.
Program makeGemmEpilogueProgram() {
  using namespace moe::rt::testing;
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  uint32_t n = bufferNamed(program, "n");
  uint32_t head = bufferNamed(program, "lm_head.weight");
  uint32_t logits = bufferNamed(program, "logits");
  uint32_t dlogits = bufferNamed(program, "dlogits");
  uint32_t dn = bufferNamed(program, "dn");
  uint32_t y = b.temporary("logits.again", program.buffers[logits].shape);
  uint32_t dx = b.temporary("dn.again", program.buffers[dn].shape);
  b.emit(Opcode::LinearAccumulate, {n, head, logits}, {y});
  b.emit(Opcode::LinearGradInputAccumulate, {dlogits, head, dn}, {dx});
  return program;
}

/// The tiny program with its final norm's output cast to bf16 and back
/// (mixed precision's casts; the model programs here are fp32).
Program makeCastProgram() {
  using namespace moe::rt::testing;
  Program program = makeTinyProgram();
  ProgramBuilder b(program);
  uint32_t n = bufferNamed(program, "n");
  const std::vector<int64_t> &shape = program.buffers[n].shape;
  uint32_t narrow = b.temporary("n.bf16", shape, DType::BF16);
  uint32_t wide = b.temporary("n.f32", shape);
  b.emit(Opcode::Cast, {n}, {narrow});
  b.emit(Opcode::Cast, {narrow}, {wide});
  return program;
}

/// The tiny program as mixed precision compiles it (docs/precision.md):
/// fp32 masters and moments, a BF16 working copy of each weight that the
/// forward and backward read and AdamW rewrites, BF16 activations and
/// activation gradients, the loss and the weight gradients fp32. The
/// temporaries keep their fp32-sized arena ranges (BF16 fits in them).
Program makeBf16TinyProgram() {
  using namespace moe::rt::testing;
  Program program = makeTinyProgram();
  std::map<uint32_t, uint32_t> workingOf;
  for (const char *name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}) {
    uint32_t master = bufferNamed(program, name);
    Buffer copy;
    copy.name = absl::StrCat(name, ".bf16");
    copy.kind = BufferKind::WorkingCopy;
    copy.dtype = DType::BF16;
    copy.shape = program.buffers[master].shape;
    copy.master = master;
    program.buffers.push_back(copy);
    workingOf[master] = static_cast<uint32_t>(program.buffers.size() - 1);
  }
  for (const char *name : {"h", "n", "logits", "dlogits", "dn", "dh"})
    program.buffers[bufferNamed(program, name)].dtype = DType::BF16;
  for (Instruction &inst : program.instructions) {
    if (inst.opcode == Opcode::AdamW) {
      inst.operands.push_back(workingOf.at(inst.operands[0]));
      continue;
    }
    for (uint32_t &operand : inst.operands)
      if (auto copy = workingOf.find(operand); copy != workingOf.end())
        operand = copy->second;
  }
  return program;
}

/// The mixed-precision programs: the device half checks them against the
/// CPU's BF16 kernels.
std::vector<std::pair<std::string, std::function<Program()>>> bf16Programs() {
  return {{"tiny-bf16", makeBf16TinyProgram}};
}

/// Experts over a dp x 1 (ep) mesh with delayed FP8 scaling (recipe 3,
/// block 128, no FP8 dispatch) and an amax history, whose step ends with
/// Fp8AmaxUpdate over the {dp} group (the ranks hold copies).
Program makeDelayedFp8Program(int64_t dp) {
  using namespace moe::rt::testing;
  constexpr int64_t kLocalExperts = 3, kHistoryLength = 4;
  Program program = makeExpertParallelProgram({dp, 1, kLocalExperts, 3});
  ProgramBuilder b(program);
  uint32_t history =
      b.state("experts.fp8_amax_history", {kLocalExperts, 9, kHistoryLength},
              {{"ep"}, {}, {}});
  for (Instruction &inst : program.instructions)
    if (inst.opcode == Opcode::Experts || inst.opcode == Opcode::ExpertsGrad) {
      inst.intAttrs.insert(inst.intAttrs.end(), {3, 128, 0});
      inst.operands.push_back(history);
    }
  b.emit(Opcode::Fp8AmaxUpdate, {history}, {}, {b.group({"dp"})});
  return program;
}

struct NamedProgram {
  std::string name;
  std::function<Program()> make;
  /// Targets are drawn below this (0: the vocabulary).
  int32_t targetLimit = 0;
  /// Over the world's ranks (a mesh program), or on each rank alone.
  bool overTheWorld = false;
};

/// The programs, for a world of `ranks`: the single-rank ones on each rank,
/// makeMeshProgram over every dp x tp mesh of the world (its collectives
/// and grouped reductions; on one rank, over groups of one), and delayed
/// FP8 over {dp}.
std::vector<NamedProgram> programsFor(int64_t ranks) {
  using namespace moe::rt::testing;
  std::vector<NamedProgram> programs = {
      {"tiny", [] { return makeTinyProgram(); }},
      {"moe", [] { return makeMoeProgram(); }},
      {"moe-capacity",
       [] {
         MoeConfig config;
         config.capacityFactor = 1.0f;
         return makeMoeProgram(config);
       }},
      // Saved up projections, with dropped slots (zero rows).
      {"moe-kept-hidden",
       [] {
         MoeConfig config;
         config.capacityFactor = 1.0f;
         config.keepHidden = true;
         return makeMoeProgram(config);
       }},
      // The LM head fused with its loss.
      {"tiny-fused-head",
       [] {
         TinyConfig config;
         config.fusedHead = true;
         return makeTinyProgram(config);
       }},
      {"gemm-epilogues", makeGemmEpilogueProgram},
      {"scored-router", makeScoredRouterProgram},
      {"router-losses", makeRouterLossesProgram},
      {"latent-attention", makeLatentAttentionProgram},
      // Document masking: RoPE and attention at document positions.
      {"moe-documents",
       [] {
         MoeConfig config;
         config.seq = 9;
         config.documentMasking = true;
         return makeMoeProgram(config);
       }},
      {"head-norm", makeHeadNormProgram},
      {"swiglu", makeSwigluProgram},
      {"cast", makeCastProgram},
      // Mixed precision: BF16 working copies and activations.
      {"bf16", [] { return makeBf16TinyProgram(); }}};
  // tp must divide the vocabulary the table is split along.
  for (int64_t tp = 1; tp <= ranks; ++tp)
    if (ranks % tp == 0 && MeshProgramSizes::kVocab % tp == 0)
      programs.push_back({absl::StrCat("mesh dp=", ranks / tp, " x tp=", tp),
                          [=] { return makeMeshProgram({ranks / tp, tp}); },
                          0, true});
  // ZeRO-1: a whole weight updated by blocks over the world's dp ranks.
  programs.push_back({absl::StrCat("zero-1 dp=", ranks),
                      [=] {
                        MeshConfig config{ranks, 1};
                        config.zeroOne = true;
                        return makeMeshProgram(config);
                      },
                      0, true});
  // Context parallelism's ring over the world (of one: its own block).
  programs.push_back({absl::StrCat("moe-ring cp=", ranks),
                      [=] {
                        MoeConfig config;
                        config.seq = 4;
                        config.ringRanks = ranks;
                        return makeMoeProgram(config);
                      },
                      0, true});
  // A table two pipeline stages share (tied embeddings), whose gradient
  // halves their optimizers exchange: over a world of two, one per stage.
  if (ranks == 2)
    programs.push_back({"tied-head pp=2",
                        [] {
                          TinyConfig config;
                          config.tiedHead = true;
                          config.sumOverStages = true;
                          return makePipelinedTinyProgram(2, 2, "1f1b", config);
                        },
                        0, true});
  // Its loss reads the experts' output as logits over the hidden size.
  programs.push_back({absl::StrCat("delayed-fp8 dp=", ranks),
                      [=] { return makeDelayedFp8Program(ranks); },
                      ExpertParallelSizes::kHidden, true});
  return programs;
}

/// Ids drawn afresh from `seed`, below `limit`.
std::vector<int32_t> randomIds(int32_t limit, int64_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int32_t> id(0, limit - 1);
  std::vector<int32_t> ids(count);
  for (int32_t &each : ids)
    each = id(random);
  return ids;
}

/// The seeds of one program's weights (the same on every rank) and of
/// each rank's batch at each step.
uint64_t seedOf(std::initializer_list<uint64_t> parts) {
  std::seed_seq sequence(parts);
  uint32_t words[2];
  sequence.generate(std::begin(words), std::end(words));
  return (static_cast<uint64_t>(words[0]) << 32) | words[1];
}
uint64_t weightsSeed(size_t program) { return seedOf({suiteSeed, program}); }
uint64_t batchSeed(size_t program, int64_t step, int64_t rank, int which) {
  return seedOf({suiteSeed, program, static_cast<uint64_t>(step),
                 static_cast<uint64_t>(rank), static_cast<uint64_t>(which)});
}

/// Tokens and targets for one rank's step, and with document masking each
/// token's position in a document of random length.
struct Batch {
  std::vector<int32_t> tokens, targets, positions;
  const int32_t *positionsOrNull() const {
    return positions.empty() ? nullptr : positions.data();
  }
};
Batch randomBatch(const NamedProgram &named, const Program &program,
                  size_t index, int64_t count, int64_t step, int64_t rank) {
  int32_t vocab = static_cast<int32_t>(program.model.vocab);
  Batch batch{randomIds(vocab, count, batchSeed(index, step, rank, 0)),
              randomIds(named.targetLimit ? named.targetLimit : vocab, count,
                        batchSeed(index, step, rank, 1)),
              {}};
  if (program.positions >= 0) {
    // A document begins at each row's start and where a draw says so.
    int64_t seq = program.model.seq;
    std::vector<int32_t> starts =
        randomIds(3, count, batchSeed(index, step, rank, 2));
    batch.positions.resize(count);
    for (int64_t t = 0; t < count; ++t)
      batch.positions[t] =
          t % seq == 0 || starts[t] == 0 ? 0 : batch.positions[t - 1] + 1;
  }
  return batch;
}

/// The bytes of buffer `b` in the executor's storage.
std::pair<const uint8_t *, uint64_t> bytesOf(const Executor &executor,
                                             uint32_t b) {
  return {executor.bytes(b), executor.program().buffers[b].sizeInBytes()};
}

bool overlap(std::pair<const uint8_t *, uint64_t> a,
             std::pair<const uint8_t *, uint64_t> b) {
  return a.first < b.first + b.second && b.first < a.first + a.second;
}

/// The operand result `r` of `inst` shares memory with, if any.
std::optional<uint32_t> aliasedOperand(const Executor &executor,
                                       const Instruction &inst, uint32_t r) {
  for (uint32_t o : inst.operands)
    if (overlap(bytesOf(executor, r), bytesOf(executor, o)))
      return o;
  return std::nullopt;
}

/// A buffer's elements as 32-bit words (every dtype the programs use is
/// F32 or I32).
using Words = std::vector<uint32_t>;
Words copyOf(const Executor &executor, uint32_t b) {
  auto [data, size] = bytesOf(executor, b);
  Words words(size / sizeof(uint32_t));
  std::memcpy(words.data(), data, size);
  return words;
}
float asFloat(uint32_t word) {
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

/// Every group rank's `words`, in group-rank order.
absl::StatusOr<std::vector<Words>> gather(comm::Group &group,
                                          const Words &words) {
  std::vector<int32_t> mine(words.size()), all(words.size() * group.size());
  std::memcpy(mine.data(), words.data(), words.size() * sizeof(uint32_t));
  if (absl::Status status = group.allGather(mine, absl::MakeSpan(all));
      !status.ok())
    return status;
  std::vector<Words> ranks(group.size(), Words(words.size()));
  for (int r = 0; r < group.size(); ++r)
    std::memcpy(ranks[r].data(), all.data() + r * words.size(),
                words.size() * sizeof(uint32_t));
  return ranks;
}

/// What the runs saw, over all programs.
struct Coverage {
  std::set<Opcode> run;
  /// Results poisoned and checked written, per opcode.
  std::map<Opcode, int64_t> checked;
  /// Instructions checked against their definition, per opcode.
  std::map<Opcode, int64_t> defined;
};

/// The definitions of the opcodes whose result is not worth a second
/// kernel, over group `g` of n ranks: AllReduce is the sum of the ranks'
/// operands (fp32, 2^-20 of the sum of magnitudes), AllGather their
/// concatenation along dim in group order, ReduceScatter block g along dim
/// of their sum, Slice block g of this rank's operand (bit for bit), and
/// Fp8AmaxUpdate rolls each history row by one with the row's current amax
/// (its maximum over the group) as the newest past one and [0] cleared;
/// ExpertLoad adds the count of each expert's ids over the group's ranks
/// to its counter, ExpertLoadUpdate moves the bias by rate * sign(mean
/// load - load) and clears the counter (both exactly); AdamW updates its
/// parameter and moments as torch.optim.AdamW does (in double, to 1e-5).
/// Whether an AdamW update (AdamW, or ShardedAdamW's block) moved the
/// parameter and moments as torch.optim.AdamW does, in double to 1e-5: the
/// parameter's elements from `offset` on (ShardedAdamW's rows in the whole
/// copy), the gradient's and moments' from 0. Records a failure if not.
template <class View>
bool checkAdamW(const Executor &executor, const View &op,
                const std::vector<Words> &operands, int64_t offset,
                const std::string &where, std::vector<std::string> &failures) {
  const Program &program = executor.program();
  auto old = [&](int operand, int64_t i) {
    return static_cast<double>(asFloat(operands[operand][i]));
  };
  double lr = *executor.data(op.lr());
  double scale = *executor.data(op.gradScale());
  double t = static_cast<double>(*executor.ids(op.step()) + 1);
  double b1 = op.beta1(), b2 = op.beta2();
  double bias1 = 1.0 - std::pow(b1, t), bias2 = 1.0 - std::pow(b2, t);
  const char *names[] = {"param", "exp_avg", "exp_avg_sq"};
  const uint32_t updated[] = {op.param(), op.expAvg(), op.expAvgSq()};
  const int64_t at[] = {offset, 0, 0};
  for (int64_t i = 0; i < program.buffers[op.grad()].numElements(); ++i) {
    double g = executor.data(op.grad())[i] * scale;
    double m = b1 * old(2, i) + (1 - b1) * g;
    double v = b2 * old(3, i) + (1 - b2) * g * g;
    double p = old(0, offset + i) * (1 - lr * op.weightDecay()) -
               lr / bias1 * m / (std::sqrt(v / bias2) + op.eps());
    double expected[] = {p, m, v};
    for (int k = 0; k < 3; ++k) {
      float now = executor.data(updated[k])[at[k] + i];
      if (!(std::abs(now - expected[k]) <=
            1e-5 * std::abs(expected[k]) + 1e-7)) {
        failures.push_back(absl::StrCat(
            where, ": ", names[k], " '", program.buffers[updated[k]].name,
            "' [", at[k] + i, "] is ", now, ", not ", expected[k]));
        return false;
      }
    }
  }
  return true;
}

/// `operands` holds the operands as the instruction found them; the groups are
/// the program's (Program.groups). Returns the failures.
std::vector<std::string>
checkDefinition(const Executor &executor, const Instruction &inst,
                const std::vector<Words> &operands,
                const std::vector<std::unique_ptr<comm::Group>> &groups,
                const std::string &where) {
  const Program &program = executor.program();
  std::vector<std::string> failures;
  auto mismatch = [&](uint32_t buffer, int64_t i, double actual,
                      double expected) {
    failures.push_back(absl::StrCat(where, ": '", program.buffers[buffer].name,
                                    "' [", i, "] is ", actual, ", not ",
                                    expected));
  };
  auto gathered = [&](int64_t groupIndex) -> std::optional<std::vector<Words>> {
    absl::StatusOr<std::vector<Words>> all =
        gather(*groups[groupIndex], operands[0]);
    if (!all.ok()) {
      failures.push_back(absl::StrCat(where, ": ", all.status().message()));
      return std::nullopt;
    }
    return *std::move(all);
  };
  switch (inst.opcode) {
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::Slice: {
    uint32_t x = inst.operands[0], y = inst.results[0];
    int64_t groupIndex, dim = 0;
    switch (inst.opcode) {
    case Opcode::AllReduce:
      groupIndex = ops::AllReduceView(inst).group();
      break;
    case Opcode::AllGather:
      groupIndex = ops::AllGatherView(inst).group();
      dim = ops::AllGatherView(inst).dim();
      break;
    case Opcode::ReduceScatter:
      groupIndex = ops::ReduceScatterView(inst).group();
      dim = ops::ReduceScatterView(inst).dim();
      break;
    default:
      groupIndex = ops::SliceView(inst).group();
      dim = ops::SliceView(inst).dim();
      break;
    }
    comm::Group &group = *groups[groupIndex];
    // Empty on every rank of the group alike: nothing moves.
    if (operands[0].empty())
      break;
    const std::vector<int64_t> &shape = program.buffers[x].shape;
    int64_t outer = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= shape[d];
    int64_t inner = shape.empty() ? 1 : operands[0].size() / outer;
    int64_t n = group.size(), g = group.rank();
    Words result = copyOf(executor, y);
    std::vector<Words> all;
    if (inst.opcode != Opcode::Slice) {
      std::optional<std::vector<Words>> each = gathered(groupIndex);
      if (!each)
        return failures;
      all = *std::move(each);
    }
    // The sum over the ranks of element i of their operands, and the
    // tolerance of an fp32 sum of them.
    auto sum = [&](int64_t i) {
      double total = 0, magnitude = 0;
      for (const Words &rank : all) {
        total += asFloat(rank[i]);
        magnitude += std::abs(asFloat(rank[i]));
      }
      return std::make_pair(total, std::ldexp(magnitude, -20));
    };
    // Elements of one rank's block along dim, and of the result's slices.
    int64_t block = inst.opcode == Opcode::AllGather ? inner : inner / n;
    int64_t resultInner = static_cast<int64_t>(result.size()) / outer;
    for (int64_t o = 0; o < outer && failures.empty(); ++o) {
      for (int64_t k = 0; k < resultInner; ++k) {
        int64_t at = o * resultInner + k;
        if (inst.opcode == Opcode::AllReduce ||
            inst.opcode == Opcode::ReduceScatter) {
          auto [expected, tolerance] =
              sum(inst.opcode == Opcode::AllReduce ? at
                                                   : o * inner + g * block + k);
          if (!(std::abs(asFloat(result[at]) - expected) <= tolerance)) {
            mismatch(y, at, asFloat(result[at]), expected);
            break;
          }
          continue;
        }
        uint32_t expected = inst.opcode == Opcode::AllGather
                                ? all[k / block][o * inner + k % block]
                                : operands[0][o * inner + g * block + k];
        if (result[at] != expected) {
          failures.push_back(absl::StrCat(
              where, ": '", program.buffers[y].name, "' [", at, "] is not '",
              program.buffers[x].name, "' of group rank ",
              inst.opcode == Opcode::AllGather ? k / block : g, " bit for bit"));
          break;
        }
      }
    }
    break;
  }
  case Opcode::ReduceBucket: {
    // Each result is its operand's AllReduce, or with `scatter` block g of
    // dimension 0 of its sum (fp32, 2^-20 of the sum of magnitudes).
    ops::ReduceBucketView op(inst);
    comm::Group &group = *groups[op.group()];
    int64_t n = op.scatter() ? group.size() : 1, g = group.rank();
    for (size_t i = 0; i < inst.operands.size() && failures.empty(); ++i) {
      absl::StatusOr<std::vector<Words>> all = gather(group, operands[i]);
      if (!all.ok()) {
        failures.push_back(absl::StrCat(where, ": ", all.status().message()));
        break;
      }
      uint32_t y = inst.results[i];
      Words result = copyOf(executor, y);
      int64_t block = static_cast<int64_t>(operands[i].size()) / n;
      for (int64_t k = 0; k < static_cast<int64_t>(result.size()); ++k) {
        double total = 0, magnitude = 0;
        for (const Words &rank : *all) {
          total += asFloat(rank[g * block * (n > 1) + k]);
          magnitude += std::abs(asFloat(rank[g * block * (n > 1) + k]));
        }
        if (!(std::abs(asFloat(result[k]) - total) <=
              std::ldexp(magnitude, -20))) {
          mismatch(y, k, asFloat(result[k]), total);
          break;
        }
      }
    }
    break;
  }
  case Opcode::Fp8AmaxUpdate: {
    uint32_t history = inst.operands[0];
    const Buffer &buffer = program.buffers[history];
    int64_t length = buffer.shape[2];
    std::vector<Words> all = {operands[0]};
    if (std::optional<int64_t> groupIndex =
            ops::Fp8AmaxUpdateView(inst).group()) {
      std::optional<std::vector<Words>> each = gathered(*groupIndex);
      if (!each)
        return failures;
      all = *std::move(each);
    }
    const float *now = executor.data(history);
    for (int64_t i = 0; i < buffer.numElements(); ++i) {
      int64_t row = i / length, at = i % length;
      float expected = 0.0f;
      if (at == 1)
        for (const Words &rank : all)
          expected = std::max(expected, asFloat(rank[row * length]));
      else if (at > 1)
        expected = asFloat(operands[0][i - 1]);
      if (std::memcmp(&now[i], &expected, sizeof(float)) != 0) {
        mismatch(history, i, now[i], expected);
        break;
      }
    }
    break;
  }
  case Opcode::ExpertLoad: {
    ops::ExpertLoadView op(inst);
    std::vector<Words> all = {operands[0]};
    if (std::optional<int64_t> groupIndex = op.group()) {
      std::optional<std::vector<Words>> each = gathered(*groupIndex);
      if (!each)
        return failures;
      all = *std::move(each);
    }
    int64_t experts = program.buffers[op.load()].numElements();
    std::vector<float> expected(experts);
    for (int64_t e = 0; e < experts; ++e)
      expected[e] = asFloat(operands[1][e]);
    for (const Words &rank : all)
      for (uint32_t word : rank) {
        int32_t id;
        std::memcpy(&id, &word, sizeof(id));
        if (id >= 0 && id < experts)
          expected[id] += 1.0f;
      }
    const float *now = executor.data(op.load());
    for (int64_t e = 0; e < experts; ++e)
      if (now[e] != expected[e]) {
        mismatch(op.load(), e, now[e], expected[e]);
        break;
      }
    break;
  }
  case Opcode::ExpertLoadUpdate: {
    ops::ExpertLoadUpdateView op(inst);
    int64_t experts = program.buffers[op.load()].numElements();
    double mean = 0.0;
    for (int64_t e = 0; e < experts; ++e)
      mean += asFloat(operands[0][e]) / static_cast<double>(experts);
    for (int64_t e = 0; e < experts; ++e) {
      if (executor.data(op.load())[e] != 0.0f) {
        mismatch(op.load(), e, executor.data(op.load())[e], 0.0);
        break;
      }
      std::optional<uint32_t> bias = op.bias();
      if (!bias)
        continue;
      double error = mean - asFloat(operands[0][e]);
      float expected =
          asFloat(operands[1][e]) + op.rate() * (error > 0   ? 1.0f
                                                 : error < 0 ? -1.0f
                                                             : 0.0f);
      if (executor.data(*bias)[e] != expected) {
        mismatch(*bias, e, executor.data(*bias)[e], expected);
        break;
      }
    }
    break;
  }
  case Opcode::AdamW:
    checkAdamW(executor, ops::AdamWView(inst), operands, 0, where, failures);
    break;
  case Opcode::ShardedAdamW: {
    // This rank's block follows AdamW at its rows of the whole copy (of
    // the param without a working copy), and the gather leaves every rank
    // of the group the same whole copy: together, each block is its
    // owner's update.
    ops::ShardedAdamWView op(inst);
    comm::Group &group = *groups[op.group()];
    int64_t count = program.buffers[op.grad()].numElements();
    std::optional<uint32_t> working = op.working();
    int64_t offset = working ? 0 : group.rank() * count;
    if (!checkAdamW(executor, op, operands, offset, where, failures))
      return failures;
    uint32_t whole = working ? *working : op.param();
    Words mine = copyOf(executor, whole);
    absl::StatusOr<std::vector<Words>> all = gather(group, mine);
    if (!all.ok()) {
      failures.push_back(absl::StrCat(where, ": ", all.status().message()));
      return failures;
    }
    for (size_t rank = 0; rank < all->size(); ++rank)
      if ((*all)[rank] != mine) {
        failures.push_back(absl::StrCat(
            where, ": rank ", rank, " of the group holds another '",
            program.buffers[whole].name, "' than rank ", group.rank()));
        return failures;
      }
    if (working) {
      const float *master = executor.data(op.param());
      auto [bytes, size] = bytesOf(executor, *working);
      for (int64_t i = 0; i < count; ++i) {
        uint16_t rounded = io::floatToBf16(master[i]), held;
        std::memcpy(&held, bytes + 2 * (group.rank() * count + i), 2);
        if (held != rounded) {
          mismatch(*working, group.rank() * count + i, io::bf16ToFloat(held),
                   io::bf16ToFloat(rounded));
          break;
        }
      }
    }
    break;
  }
  default:
    break;
  }
  return failures;
}

/// Whether checkDefinition checks `opcode`.
bool hasDefinitionCheck(Opcode opcode) {
  return opcode == Opcode::AllReduce || opcode == Opcode::AllGather ||
         opcode == Opcode::ReduceScatter || opcode == Opcode::Slice ||
         opcode == Opcode::Fp8AmaxUpdate || opcode == Opcode::AdamW ||
         opcode == Opcode::ShardedAdamW || opcode == Opcode::ReduceBucket ||
         opcode == Opcode::ExpertLoad || opcode == Opcode::ExpertLoadUpdate;
}

/// Two steps of program `index` of `programs` on the CPU backend, each
/// instruction's results poisoned first and checked after. A collective
/// call of the world's ranks for a program over the world.
void checkEveryElementWritten(const std::vector<NamedProgram> &programs,
                              size_t index, Coverage &coverage) {
  const NamedProgram &named = programs[index];
  const std::string name = named.name;
  std::shared_ptr<const Program> shared =
      std::make_shared<const Program>(named.make());
  const Program &program = *shared;
  BackendOptions options;
  if (named.overTheWorld)
    options.world = world;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend("cpu", shared, options);
  ASSERT_TRUE(backend.ok()) << name << ": " << backend.status();
  ASSERT_TRUE((*backend)->initialize(weightsSeed(index)).ok());
  // The definitions' own groups, apart from the step's.
  std::vector<std::unique_ptr<comm::Group>> groups;
  for (const AxisList &axes : program.groups) {
    absl::StatusOr<std::unique_ptr<comm::Group>> group =
        (*backend)->createGroup(axes);
    ASSERT_TRUE(group.ok()) << name << ": " << group.status();
    groups.push_back(*std::move(group));
  }
  // The hooks write into the host step's buffers between instructions.
  Executor &executor = const_cast<Executor &>(*(*backend)->hostStep());
  StepHooks hooks;
  std::vector<std::string> failures;
  std::set<std::string> inPlaceLines;
  std::vector<Words> operandsBefore;
  std::string at;
  auto where = [&](size_t index, const Instruction &inst) {
    return absl::StrCat(name, ": ", at, "instruction ", index, " (",
                        opcodeName(inst.opcode), ")");
  };
  // Results poisoned before the instruction: the others alias an operand.
  auto poisonable = [&](const Instruction &inst) {
    std::vector<uint32_t> results;
    for (uint32_t r : inst.results)
      if (!aliasedOperand(executor, inst, r) &&
          program.buffers[r].sizeInBytes() > 0)
        results.push_back(r);
    return results;
  };
  hooks.beforeInstruction = [&](size_t, const Instruction &inst) {
    if (hasDefinitionCheck(inst.opcode)) {
      operandsBefore.clear();
      for (uint32_t o : inst.operands)
        operandsBefore.push_back(copyOf(executor, o));
    }
    for (uint32_t r : poisonable(inst)) {
      const Buffer &buffer = program.buffers[r];
      int64_t n = buffer.numElements();
      if (buffer.dtype == DType::F32) {
        float poison;
        std::memcpy(&poison, &kPoisonBits, sizeof(poison));
        std::fill(executor.data(r), executor.data(r) + n, poison);
      } else if (buffer.dtype == DType::BF16) {
        uint16_t *bits = reinterpret_cast<uint16_t *>(executor.bytes(r));
        std::fill(bits, bits + n, kPoisonBf16Bits);
      } else {
        std::fill(executor.ids(r), executor.ids(r) + n, kPoisonId);
      }
    }
  };
  hooks.afterInstruction = [&](size_t index, const Instruction &inst) {
    coverage.run.insert(inst.opcode);
    for (uint32_t r : inst.results) {
      std::optional<uint32_t> operand = aliasedOperand(executor, inst, r);
      if (!operand)
        continue;
      if (!ops::opInfo(inst.opcode).inPlace) {
        failures.push_back(absl::StrCat(
            where(index, inst), ": result '", program.buffers[r].name,
            "' shares memory with operand '", program.buffers[*operand].name,
            "' but the op table does not mark ", opcodeName(inst.opcode),
            " in-place"));
        continue;
      }
      inPlaceLines.insert(absl::StrCat(
          opcodeName(inst.opcode), " '", program.buffers[r].name, "' over '",
          program.buffers[*operand].name, "'"));
    }
    for (uint32_t r : poisonable(inst)) {
      const Buffer &buffer = program.buffers[r];
      int64_t n = buffer.numElements(), left = 0;
      ++coverage.checked[inst.opcode];
      for (int64_t i = 0; i < n; ++i) {
        if (buffer.dtype == DType::F32) {
          uint32_t bits;
          std::memcpy(&bits, executor.data(r) + i, sizeof(bits));
          left += bits == kPoisonBits;
        } else if (buffer.dtype == DType::BF16) {
          uint16_t bits;
          std::memcpy(&bits, executor.bytes(r) + 2 * i, sizeof(bits));
          left += bits == kPoisonBf16Bits;
        } else {
          left += executor.ids(r)[i] == kPoisonId;
        }
      }
      if (left > 0)
        failures.push_back(absl::StrCat(where(index, inst), " left ", left,
                                        " of ", n, " elements of '",
                                        buffer.name, "' unwritten"));
    }
    if (hasDefinitionCheck(inst.opcode)) {
      ++coverage.defined[inst.opcode];
      for (std::string &each :
           checkDefinition(executor, inst, operandsBefore, groups,
                           where(index, inst)))
        failures.push_back(std::move(each));
    }
  };
  for (int64_t step = 0; step < 2; ++step) {
    at = absl::StrCat("step ", step, ", ");
    Batch batch = randomBatch(named, program, index,
                              (*backend)->tokensPerStep(), step,
                              (*backend)->rank());
    absl::StatusOr<StepResult> result =
        (*backend)->runStep(batch.tokens.data(), batch.targets.data(), step,
                            hooks, batch.positionsOrNull());
    // An unwritten element is the first thing to know of a failed step.
    for (const std::string &each : failures)
      ADD_FAILURE() << each;
    ASSERT_TRUE(failures.empty());
    ASSERT_TRUE(result.ok()) << name << ": " << result.status();
  }
  if (!inPlaceLines.empty() && world->rank() == 0)
    std::printf("%s: in place, so not poisoned: %s\n", name.c_str(),
                absl::StrJoin(inPlaceLines, ", ").c_str());
}

/// Whether `opcode` runs only between two pipeline stages' ranks
/// (PipelineGradientSum): programsFor has its program for a world of two
/// only, which conformance-ranks.test runs.
bool needsTwoStages(Opcode opcode) {
  return opcode == Opcode::PipelineGradientSum;
}

/// The opcodes of the op table the runs over a world of `ranks` did not
/// cover: never run, or with results of which none was poisoned and
/// checked written, or without results and not checked against its
/// definition. What needs two stages counts in a world of two only.
std::vector<std::string> uncovered(const Coverage &coverage,
                                   int64_t ranks = 2) {
  std::vector<std::string> missing;
  for (const ops::OpInfo &info : ops::kOpTable) {
    if (needsTwoStages(info.opcode) && ranks != 2)
      continue;
    if (!coverage.run.count(info.opcode))
      missing.push_back(absl::StrCat(info.name, " (never run)"));
    else if (info.numResults > 0 && !coverage.checked.count(info.opcode) &&
             !coverage.defined.count(info.opcode))
      missing.push_back(absl::StrCat(
          info.name, " (no result poisoned and checked written: every one "
                     "was in place)"));
    else if (info.numResults == 0 && !coverage.defined.count(info.opcode))
      missing.push_back(absl::StrCat(
          info.name, " (no results, and no check against its definition)"));
  }
  return missing;
}

/// The word a backend fills a poisoned buffer of `dtype` with.
uint32_t poisonWord(DType dtype) {
  if (dtype == DType::F32)
    return kPoisonBits;
  if (dtype == DType::BF16)
    return uint32_t{kPoisonBf16Bits} << 16 | kPoisonBf16Bits;
  return static_cast<uint32_t>(kPoisonId);
}

/// Whether buffers `a` and `b` share memory by the program's plan: every
/// backend keeps each parameter, optimizer state and input alone and the
/// temporaries at their offsets in one arena.
bool sharesMemory(const Program &program, uint32_t a, uint32_t b) {
  if (a == b)
    return true;
  const Buffer &x = program.buffers[a], &y = program.buffers[b];
  return x.kind == BufferKind::Temporary && y.kind == BufferKind::Temporary &&
         x.sizeInBytes() > 0 && y.sizeInBytes() > 0 &&
         x.offset < y.offset + y.sizeInBytes() &&
         y.offset < x.offset + x.sizeInBytes();
}

/// Buffer `b` of `backend` as words, through the backend interface.
absl::StatusOr<Words> readWords(const Backend &backend, uint32_t b) {
  Words words((backend.program().buffers[b].sizeInBytes() + 3) / 4);
  if (absl::Status status = backend.readBuffer(b, words.data());
      !status.ok())
    return status;
  return words;
}

/// One instruction of the CPU's step: its operands as it found them, and
/// its operands and results as it left them.
struct Recorded {
  std::vector<Words> operandsBefore, operandsAfter, results;
};

/// The bound of a device's f32 results of `inst` against the CPU's, as a
/// power of two of the result's largest magnitude: 2^-6, as docs/cuda.md
/// allows the whole steps' loss and norm (the CUDA GEMMs round their inputs
/// to BF16, 8 significant bits: an output moves by up to 2^-7 of its
/// terms), and 2^-5 for experts with FP8 GEMMs, as docs/cuda.md allows
/// their steps (E4M3 keeps 4 significant bits: an input the backends
/// compute apart, such as the SwiGLU before the down projection, may round
/// to the next step).
int toleranceExponent(const Instruction &inst) {
  std::optional<Fp8Scaling> scaling;
  if (std::optional<ops::ExpertsRecipe> recipe = ops::expertsRecipeOf(inst))
    scaling = recipe->fp8Scaling;
  return scaling && *scaling != Fp8Scaling::None ? -5 : -6;
}

/// Element i of a float buffer read as words: f32 words hold one, bf16
/// ones two (the first in the low half).
double floatElement(const Buffer &buffer, const Words &words, int64_t i) {
  if (buffer.dtype == DType::BF16)
    return io::bf16ToFloat(
        static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2))));
  return asFloat(words[i]);
}

double toleranceOf(const Buffer &buffer, const Words &expected, int exponent) {
  double largest = 0.0;
  for (int64_t i = 0; i < buffer.numElements(); ++i)
    if (double e = floatElement(buffer, expected, i); std::isfinite(e))
      largest = std::max(largest, std::abs(e));
  return std::ldexp(largest, exponent);
}

/// Router rows of `probs` ([rows, E], the CPU's) whose top-k choice is a
/// near-tie: the k-th and (k+1)-th largest probabilities within 2^-16 of
/// each other: far above the ulps in which two fp32 softmaxes of the same
/// logits differ, and a gap random logits rarely leave (the seed is fixed,
/// so whether one occurs does not flake). Either choice is right there.
bool isNearTie(const Words &probs, int64_t experts, int64_t topK,
               int64_t row) {
  if (topK >= experts)
    return false;
  std::vector<float> sorted(experts);
  for (int64_t e = 0; e < experts; ++e)
    sorted[e] = asFloat(probs[row * experts + e]);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  return sorted[topK - 1] - sorted[topK] <= std::ldexp(sorted[topK - 1], -16);
}

/// The failures of the device's `actual` words of buffer `b` against the
/// CPU's `expected`: i32 exactly, f32 within toleranceOf(expected,
/// exponent) (and non-finite exactly where the CPU's is), skipping the rows
/// in `skipRows` (rows of `rowLength` elements).
std::vector<std::string> compareWords(const Program &program, uint32_t b,
                                      const Words &actual,
                                      const Words &expected, int exponent,
                                      const std::string &where,
                                      const std::set<int64_t> &skipRows = {},
                                      int64_t rowLength = 1) {
  const Buffer &buffer = program.buffers[b];
  bool isFloat = buffer.dtype == DType::F32 || buffer.dtype == DType::BF16;
  double tolerance = isFloat ? toleranceOf(buffer, expected, exponent) : 0.0;
  int64_t n = buffer.numElements();
  for (int64_t i = 0; i < n; ++i) {
    if (skipRows.count(i / rowLength))
      continue;
    if (!isFloat) {
      if (actual[i] != expected[i])
        return {absl::StrCat(where, ": '", buffer.name, "' [", i, "] is ",
                             static_cast<int32_t>(actual[i]), ", not the cpu's ",
                             static_cast<int32_t>(expected[i]))};
      continue;
    }
    double a = floatElement(buffer, actual, i),
           e = floatElement(buffer, expected, i);
    bool close = std::isfinite(e) ? std::abs(a - e) <= tolerance
                                  : std::isnan(e) ? std::isnan(a) : a == e;
    if (!close)
      return {absl::StrCat(where, ": '", buffer.name, "' [", i, "] is ", a,
                           ", not the cpu's ", e, " (within ", tolerance, ")")};
  }
  return {};
}

/// What a device backend's runs saw: Coverage, and the programs it refused
/// at creation (what the suite cannot run there) with its reason.
struct DeviceCoverage {
  Coverage coverage;
  std::vector<std::string> refused;
  /// Opcodes of the programs it ran.
  std::set<Opcode> inRunPrograms;
};

/// Two steps of program `index` of `programs` on the device backend
/// `backendName` against the CPU's, instruction by instruction, from the
/// same weights and batches: before each instruction the device's operands
/// are set to the CPU's (so that each instruction is checked alone, not
/// the drift of the ones before it) and its results poisoned; after it,
/// every element must have been written and be the CPU's within
/// compareWords' bound, and so must the operands it updates in place
/// (AdamW, Fp8AmaxUpdate). A near-tie in a router's top-k may choose
/// either expert: those rows' weights and indices are not compared (the
/// probabilities are), and with a capacity factor, where one choice moves
/// which later tokens are dropped, no row's after the first tie is. Skips
/// the test if the device backend cannot be created for the first program.
void checkInstructionsAgainstCpu(const std::string &backendName,
                                 const BackendOptions &deviceOptions,
                                 const std::vector<NamedProgram> &programs,
                                 size_t index, DeviceCoverage &seen) {
  const NamedProgram &named = programs[index];
  const std::string name = named.name;
  std::shared_ptr<const Program> shared =
      std::make_shared<const Program>(named.make());
  const Program &program = *shared;
  // MOE_VIRTUAL_GPU=NAME puts the cuda backend on the virtual GPU, as
  // moe-run's --virtual-gpu NAME does (test/gpu/run.sh --rehearse).
  BackendOptions options = deviceOptions;
  if (const char *virtualGpu = std::getenv("MOE_VIRTUAL_GPU");
      virtualGpu && backendName != "cpu")
    options.virtualGpu = virtualGpu;
  absl::StatusOr<std::unique_ptr<Backend>> created =
      createBackend(backendName, shared, options);
  if (!created.ok() &&
      (created.status().code() == absl::StatusCode::kFailedPrecondition ||
       created.status().code() == absl::StatusCode::kUnimplemented)) {
    // No device (or no module) refuses the first program already.
    if (index == 0)
      GTEST_SKIP() << created.status().message();
    seen.refused.push_back(
        absl::StrCat(name, ": ", created.status().message()));
    return;
  }
  ASSERT_TRUE(created.ok()) << name << ": " << created.status();
  Backend &device = **created;
  for (const Instruction &inst : program.instructions)
    seen.inRunPrograms.insert(inst.opcode);
  absl::StatusOr<std::unique_ptr<Backend>> cpuCreated =
      createBackend("cpu", shared, {});
  ASSERT_TRUE(cpuCreated.ok()) << cpuCreated.status();
  Backend &cpu = **cpuCreated;
  ASSERT_TRUE(cpu.initialize(weightsSeed(index)).ok());
  ASSERT_TRUE(device.initialize(weightsSeed(index)).ok());

  std::vector<std::string> failures;
  auto read = [&](const Backend &backend, uint32_t b) {
    absl::StatusOr<Words> words = readWords(backend, b);
    if (!words.ok()) {
      failures.push_back(absl::StrCat(name, ": ", words.status().message()));
      return Words(program.buffers[b].numElements());
    }
    return *std::move(words);
  };
  auto readAll = [&](const Backend &backend,
                     const std::vector<uint32_t> &buffers) {
    std::vector<Words> all;
    for (uint32_t b : buffers)
      all.push_back(read(backend, b));
    return all;
  };
  auto poisonable = [&](const Instruction &inst) {
    std::vector<uint32_t> results;
    for (uint32_t r : inst.results)
      if (program.buffers[r].sizeInBytes() > 0 &&
          std::none_of(inst.operands.begin(), inst.operands.end(),
                       [&](uint32_t o) { return sharesMemory(program, r, o); }))
        results.push_back(r);
    return results;
  };
  for (int64_t step = 0; step < 2; ++step) {
    std::string at = absl::StrCat("step ", step, ", ");
    auto where = [&](size_t i, const Instruction &inst) {
      return absl::StrCat(name, ": ", at, "instruction ", i, " (",
                          opcodeName(inst.opcode), ") on ", backendName);
    };
    Batch batch = randomBatch(named, program, index, cpu.tokensPerStep(),
                              step, 0);
    const int32_t *tokens = batch.tokens.data(),
                  *targets = batch.targets.data();
    std::vector<Recorded> recorded(program.instructions.size());
    StepHooks record;
    record.beforeInstruction = [&](size_t i, const Instruction &inst) {
      recorded[i].operandsBefore = readAll(cpu, inst.operands);
    };
    record.afterInstruction = [&](size_t i, const Instruction &inst) {
      recorded[i].operandsAfter = readAll(cpu, inst.operands);
      recorded[i].results = readAll(cpu, inst.results);
    };
    absl::StatusOr<StepResult> expected =
        cpu.runStep(tokens, targets, step, record, batch.positionsOrNull());
    ASSERT_TRUE(expected.ok()) << name << ": " << expected.status();
    ASSERT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");

    StepHooks check;
    check.beforeInstruction = [&](size_t i, const Instruction &inst) {
      for (size_t k = 0; k < inst.operands.size(); ++k)
        if (absl::Status status = device.writeBuffer(
                inst.operands[k], recorded[i].operandsBefore[k].data());
            !status.ok())
          failures.push_back(absl::StrCat(where(i, inst), ": ",
                                          status.message()));
      for (uint32_t r : poisonable(inst))
        if (absl::Status status =
                device.fillBuffer(r, poisonWord(program.buffers[r].dtype));
            !status.ok())
          failures.push_back(absl::StrCat(where(i, inst), ": ",
                                          status.message()));
    };
    check.afterInstruction = [&](size_t i, const Instruction &inst) {
      Coverage &coverage = seen.coverage;
      coverage.run.insert(inst.opcode);
      const Recorded &cpuSaw = recorded[i];
      std::vector<Words> results = readAll(device, inst.results);
      std::vector<uint32_t> poisoned = poisonable(inst);
      for (size_t k = 0; k < inst.results.size(); ++k) {
        uint32_t r = inst.results[k];
        if (std::find(poisoned.begin(), poisoned.end(), r) == poisoned.end())
          continue;
        ++coverage.checked[inst.opcode];
        const Buffer &buffer = program.buffers[r];
        uint32_t poison = poisonWord(buffer.dtype);
        int64_t left = 0;
        if (buffer.dtype == DType::BF16) {
          for (int64_t e = 0; e < buffer.numElements(); ++e)
            left += static_cast<uint16_t>(results[k][e / 2] >>
                                          (16 * (e % 2))) == kPoisonBf16Bits;
        } else {
          left = std::count(results[k].begin(),
                            results[k].begin() + buffer.numElements(), poison);
        }
        if (left > 0)
          failures.push_back(absl::StrCat(where(i, inst), " left ", left,
                                          " of ", buffer.numElements(),
                                          " elements of '", buffer.name,
                                          "' unwritten"));
      }
      // The rows of a router's near-ties, which either choice is right for.
      std::set<int64_t> tiedRows;
      int64_t topK = 1;
      if (inst.opcode == Opcode::Router) {
        ops::RouterView op(inst);
        topK = op.topK();
        int64_t experts = program.buffers[op.probs()].shape.back();
        int64_t rows = program.buffers[op.indices()].numElements() / topK;
        for (int64_t row = 0; row < rows; ++row) {
          bool same = true;
          for (int64_t j = 0; j < topK; ++j)
            same &= results[2][row * topK + j] ==
                    cpuSaw.results[2][row * topK + j];
          if (same || !isNearTie(cpuSaw.results[0], experts, topK, row))
            continue;
          if (op.capacityFactor() > 0.0f) {
            for (int64_t later = row; later < rows; ++later)
              tiedRows.insert(later);
            break;
          }
          tiedRows.insert(row);
        }
        if (!tiedRows.empty() && world->rank() == 0)
          std::printf("%s: %zu router rows tied within 2^-16, not "
                      "compared\n",
                      where(i, inst).c_str(), tiedRows.size());
      }
      int exponent = toleranceExponent(inst);
      for (size_t k = 0; k < inst.results.size(); ++k) {
        bool routed = inst.opcode == Opcode::Router && k > 0;
        for (std::string &each : compareWords(
                 program, inst.results[k], results[k], cpuSaw.results[k],
                 exponent, where(i, inst),
                 routed ? tiedRows : std::set<int64_t>{}, routed ? topK : 1))
          failures.push_back(std::move(each));
      }
      // What it updates in place (AdamW's parameter and moments, the amax
      // history): an opcode without results is covered by this check. An
      // operand under a result was compared as the result.
      std::vector<Words> operands = readAll(device, inst.operands);
      for (size_t k = 0; k < inst.operands.size(); ++k) {
        uint32_t o = inst.operands[k];
        if (std::any_of(inst.results.begin(), inst.results.end(),
                        [&](uint32_t r) { return sharesMemory(program, r, o); }))
          continue;
        for (std::string &each :
             compareWords(program, o, operands[k], cpuSaw.operandsAfter[k],
                          exponent, where(i, inst)))
          failures.push_back(std::move(each));
      }
      if (inst.results.empty())
        ++coverage.defined[inst.opcode];
    };
    absl::StatusOr<StepResult> actual =
        device.runStep(tokens, targets, step, check, batch.positionsOrNull());
    for (const std::string &each : failures)
      ADD_FAILURE() << each;
    ASSERT_TRUE(failures.empty());
    ASSERT_TRUE(actual.ok()) << name << ": " << actual.status();
    // Every instruction's operands were the CPU's: so are the step's
    // scalars, within the same bound.
    EXPECT_NEAR(actual->loss, expected->loss, std::ldexp(expected->loss, -6))
        << name;
    EXPECT_NEAR(actual->gradNorm, expected->gradNorm,
                std::ldexp(expected->gradNorm, -6))
        << name;
    EXPECT_EQ(actual->lr, expected->lr) << name;
  }
}

/// The device half of the suite for backend `backendName` (created with
/// `deviceOptions`: the virtual GPU's, say): every program of one rank
/// through checkInstructionsAgainstCpu, and the op table's coverage.
void checkDeviceBackend(const std::string &backendName,
                        const BackendOptions &deviceOptions = {}) {
  // A device backend runs the programs of one rank (programsFor(1): the
  // mesh programs over groups of one). Its collectives over real groups
  // are the CPU's concern in conformance-ranks.test: two device backends
  // of one process cannot form a group of two.
  DeviceCoverage seen;
  std::vector<NamedProgram> programs = programsFor(1);
  // Mixed precision's programs, on a device against the CPU's BF16 kernels
  // (the CPU's own half runs the fp32 programs only).
  if (backendName != "cpu")
    for (auto &[name, make] : bf16Programs())
      programs.push_back({name, make});
  for (size_t i = 0; i < programs.size(); ++i) {
    checkInstructionsAgainstCpu(backendName, deviceOptions, programs, i, seen);
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure())
      return;
  }
  // What the backend refuses to create (its capability record) the suite
  // cannot run there: an opcode only such programs have is reported, and
  // every other one must be covered.
  std::vector<std::string> missing, refusedOnly;
  for (const std::string &each : uncovered(seen.coverage, /*ranks=*/1)) {
    const ops::OpInfo *info = nullptr;
    for (const ops::OpInfo &entry : ops::kOpTable)
      if (absl::StartsWith(each, absl::StrCat(entry.name, " ")))
        info = &entry;
    bool inRun = info && seen.inRunPrograms.count(info->opcode);
    (inRun || seen.refused.empty() ? missing : refusedOnly).push_back(each);
  }
  if (!seen.refused.empty())
    std::printf("%s refused: %s; so not covered on %s: %s\n",
                backendName.c_str(), absl::StrJoin(seen.refused, "; ").c_str(),
                backendName.c_str(),
                refusedOnly.empty() ? "none"
                                    : absl::StrJoin(refusedOnly, ", ").c_str());
  EXPECT_TRUE(missing.empty())
      << "opcodes of the op table no conformance program covers on "
      << backendName << ": " << absl::StrJoin(missing, ", ");
}

class ConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceTest, EveryOpcode) {
  SCOPED_TRACE(::testing::Message()
               << "conformance seed " << suiteSeed
               << " (MOE_CONFORMANCE_SEED)");
  const std::string &backendName = GetParam();
  if (backendName == "cpu") {
    Coverage coverage;
    std::vector<NamedProgram> programs = programsFor(world->size());
    for (size_t i = 0; i < programs.size(); ++i) {
      checkEveryElementWritten(programs, i, coverage);
      if (HasFatalFailure())
        return;
    }
    std::vector<std::string> missing = uncovered(coverage, world->size());
    EXPECT_TRUE(missing.empty())
        << "opcodes of the op table no conformance program covers: "
        << absl::StrJoin(missing, ", ");
    return;
  }
  checkDeviceBackend(backendName);
}

// The check that makes the suite fail for an uncovered opcode, on what a
// run that reached one opcode only would have seen.
TEST(ConformanceCoverage, NamesEveryOpcodeNotCovered) {
  Coverage coverage;
  coverage.run = {Opcode::Linear, Opcode::Add, Opcode::AdamW,
                  Opcode::Fp8AmaxUpdate};
  coverage.checked[Opcode::Linear] = 1;
  coverage.defined[Opcode::Fp8AmaxUpdate] = 1;
  std::vector<std::string> missing = uncovered(coverage);
  EXPECT_EQ(missing.size(), kNumOpcodes - 2);
  auto has = [&](const std::string &line) {
    return std::find(missing.begin(), missing.end(), line) != missing.end();
  };
  EXPECT_TRUE(has("Slice (never run)"));
  EXPECT_TRUE(has("Add (no result poisoned and checked written: every one "
                  "was in place)"));
  EXPECT_TRUE(
      has("AdamW (no results, and no check against its definition)"));
}

// The mixed-precision programs the device half runs are programs the
// verifier accepts (a device needs none to tell).
TEST(ConformanceBf16, ProgramsAreValid) {
  for (auto &[name, make] : bf16Programs()) {
    absl::Status status = verifyProgram(make());
    EXPECT_TRUE(status.ok()) << name << ": " << status;
  }
}

// The device half on the CPU backend in the device's place: the Backend
// interface's buffer access (readBuffer, writeBuffer, fillBuffer) and the
// per-instruction comparison run here without a device, where the CPU must
// match itself.
TEST(ConformanceDeviceHalf, CpuInTheDevicesPlace) {
  SCOPED_TRACE(::testing::Message()
               << "conformance seed " << suiteSeed
               << " (MOE_CONFORMANCE_SEED)");
  checkDeviceBackend("cpu");
}

// The CUDA backend's sources on the virtual GPU (an H100; lib/Runtime/
// VirtualGpu), against the CPU as on a device: skipped where the virtual
// GPU is not built.
TEST(ConformanceVirtualGpu, EveryOpcodeOnTheVirtualH100) {
  SCOPED_TRACE(::testing::Message()
               << "conformance seed " << suiteSeed
               << " (MOE_CONFORMANCE_SEED)");
  BackendOptions options;
  options.virtualGpu = "h100";
  checkDeviceBackend("cuda", options);
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest,
                         ::testing::ValuesIn(backendNames()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param;
                         });

} // namespace

int main(int argc, char **argv) {
  // Without a launcher, a world of one that needs no MPI runtime (the bare
  // GPU machine of test/gpu/run.sh has none).
  absl::StatusOr<std::unique_ptr<comm::World>> world =
      comm::World::start(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "ConformanceTests: %s\n",
                 std::string(world.status().message()).c_str());
    return 1;
  }
  ::world = world->get();
  if (const char *seed = std::getenv("MOE_CONFORMANCE_SEED");
      seed && !absl::SimpleAtoi(seed, &suiteSeed)) {
    std::fprintf(stderr,
                 "ConformanceTests: MOE_CONFORMANCE_SEED '%s': expected an "
                 "unsigned decimal integer\n",
                 seed);
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if ((*world)->rank() != 0)
    GTEST_FLAG_SET(brief, true);
  return RUN_ALL_TESTS();
}
