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
// - On a device backend, whose buffers the host cannot read between
//   instructions (Backend::hostStep() is null), a whole step from the same
//   weights gives the CPU's loss and gradient norm within the BF16 GEMMs'
//   tolerance; without the device (or without the backend's module) the
//   test is skipped, saying why.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Artifact/OpTable.h"
#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Backend/Backend.h"
#include "moe/Runtime/Comm/Communicator.h"

#include "TestProgram.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

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
constexpr int32_t kPoisonId = 0x7eadbeef;

/// The job's processes: one under ctest, each rank of an mpirun under
/// test/moe-run/conformance-ranks.test.
comm::World *world = nullptr;

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
      {"swiglu", makeSwigluProgram}};
  // tp must divide the vocabulary the table is split along.
  for (int64_t tp = 1; tp <= ranks; ++tp)
    if (ranks % tp == 0 && MeshProgramSizes::kVocab % tp == 0)
      programs.push_back({absl::StrCat("mesh dp=", ranks / tp, " x tp=", tp),
                          [=] { return makeMeshProgram({ranks / tp, tp}); },
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

/// Tokens and targets for one rank's step.
struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch randomBatch(const NamedProgram &named, const Program &program,
                  size_t index, int64_t count, int64_t step, int64_t rank) {
  int32_t vocab = static_cast<int32_t>(program.model.vocab);
  return {randomIds(vocab, count, batchSeed(index, step, rank, 0)),
          randomIds(named.targetLimit ? named.targetLimit : vocab, count,
                    batchSeed(index, step, rank, 1))};
}

/// The bytes of buffer `b` in the executor's storage.
std::pair<const uint8_t *, uint64_t> bytesOf(const Executor &executor,
                                             uint32_t b) {
  const Buffer &buffer = executor.program().buffers[b];
  const void *data = buffer.dtype == DType::F32
                         ? static_cast<const void *>(executor.data(b))
                         : static_cast<const void *>(executor.ids(b));
  return {static_cast<const uint8_t *>(data), buffer.sizeInBytes()};
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
/// AdamW updates its parameter and moments as torch.optim.AdamW does (in
/// double, to 1e-5). `operands` holds the operands as the instruction found
/// them; the groups are the program's (Program.groups). Returns the
/// failures.
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
  case Opcode::AdamW: {
    ops::AdamWView op(inst);
    const Buffer &param = program.buffers[op.param()];
    auto old = [&](int operand, int64_t i) {
      return static_cast<double>(asFloat(operands[operand][i]));
    };
    double lr = *executor.data(op.lr());
    double scale = *executor.data(op.gradScale());
    double t = static_cast<double>(*executor.ids(op.step()) + 1);
    double b1 = op.beta1(), b2 = op.beta2();
    double bias1 = 1.0 - std::pow(b1, t), bias2 = 1.0 - std::pow(b2, t);
    const char *names[] = {"param", "exp_avg", "exp_avg_sq"};
    for (int64_t i = 0; i < param.numElements(); ++i) {
      double g = executor.data(op.grad())[i] * scale;
      double m = b1 * old(2, i) + (1 - b1) * g;
      double v = b2 * old(3, i) + (1 - b2) * g * g;
      double p = old(0, i) * (1 - lr * op.weightDecay()) -
                 lr / bias1 * m / (std::sqrt(v / bias2) + op.eps());
      double expected[] = {p, m, v};
      const uint32_t updated[] = {op.param(), op.expAvg(), op.expAvgSq()};
      const float *now[] = {executor.data(updated[0]),
                            executor.data(updated[1]),
                            executor.data(updated[2])};
      for (int k = 0; k < 3; ++k)
        if (!(std::abs(now[k][i] - expected[k]) <=
              1e-5 * std::abs(expected[k]) + 1e-7)) {
          failures.push_back(absl::StrCat(where, ": ", names[k], " '",
                                          program.buffers[updated[k]].name,
                                          "' [", i, "] is ", now[k][i],
                                          ", not ", expected[k]));
          return failures;
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
         opcode == Opcode::Fp8AmaxUpdate || opcode == Opcode::AdamW;
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
    absl::StatusOr<StepResult> result = (*backend)->runStep(
        batch.tokens.data(), batch.targets.data(), step, hooks);
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

/// The opcodes of the op table the runs did not cover: never run, or with
/// results of which none was poisoned and checked written, or without
/// results and not checked against its definition.
std::vector<std::string> uncovered(const Coverage &coverage) {
  std::vector<std::string> missing;
  for (const ops::OpInfo &info : ops::kOpTable) {
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

/// A device backend's whole step of program `index` of `programs` against
/// the CPU's, from the same weights and batch.
void checkAgainstCpu(const std::string &backendName,
                     const std::vector<NamedProgram> &programs, size_t index) {
  const NamedProgram &named = programs[index];
  std::shared_ptr<const Program> shared =
      std::make_shared<const Program>(named.make());
  const Program &program = *shared;
  absl::StatusOr<std::unique_ptr<Backend>> device =
      createBackend(backendName, shared, {});
  if (!device.ok() &&
      device.status().code() == absl::StatusCode::kFailedPrecondition)
    GTEST_SKIP() << device.status().message();
  ASSERT_TRUE(device.ok()) << named.name << ": " << device.status();
  absl::StatusOr<std::unique_ptr<Backend>> cpu =
      createBackend("cpu", shared, {});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE((*cpu)->initialize(weightsSeed(index)).ok());
  ASSERT_TRUE((*device)->initialize(weightsSeed(index)).ok());
  Batch batch =
      randomBatch(named, program, index, (*cpu)->tokensPerStep(), 0, 0);
  const int32_t *tokens = batch.tokens.data(), *targets = batch.targets.data();
  absl::StatusOr<StepResult> expected =
      (*cpu)->runStep(tokens, targets, 0, {});
  absl::StatusOr<StepResult> actual =
      (*device)->runStep(tokens, targets, 0, {});
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << named.name << ": " << actual.status();
  // BF16 GEMM inputs (docs/cuda.md): 2^-6 relative.
  EXPECT_NEAR(actual->loss, expected->loss, std::ldexp(expected->loss, -6))
      << named.name;
  EXPECT_NEAR(actual->gradNorm, expected->gradNorm,
              std::ldexp(expected->gradNorm, -6))
      << named.name;
  EXPECT_EQ(actual->lr, expected->lr) << named.name;
}

/// The programs a device backend runs whole steps of (the first of
/// programsFor): the single-rank models. The device's step is compared
/// whole because the Backend interface shows a device backend's buffers
/// to no hook between instructions (hostStep() is null).
constexpr size_t kDevicePrograms = 3;

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
    std::vector<std::string> missing = uncovered(coverage);
    EXPECT_TRUE(missing.empty())
        << "opcodes of the op table no conformance program covers: "
        << absl::StrJoin(missing, ", ");
    return;
  }
  std::vector<NamedProgram> programs = programsFor(1);
  for (size_t i = 0; i < kDevicePrograms; ++i) {
    checkAgainstCpu(backendName, programs, i);
    if (IsSkipped() || HasFatalFailure())
      return;
  }
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

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest,
                         ::testing::ValuesIn(backendNames()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param;
                         });

} // namespace

int main(int argc, char **argv) {
  absl::StatusOr<std::unique_ptr<comm::World>> world = comm::World::init(&argc, &argv);
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
