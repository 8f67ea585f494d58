//===- ConformanceTest.cpp - every opcode on every backend ----------------===//
//
// Run against every registered backend (backendNames()):
// - On a backend whose step the host can observe (the CPU reference), the
//   test programs below run two steps from weights and batches drawn afresh
//   from a fixed seed (printed with any failure, so a failure reproduces):
//   every instruction has its results poisoned before it runs and checked
//   after, each element must have been written. A result that shares
//   memory with an operand is allowed only where the op table marks the
//   opcode in-place; it cannot be poisoned, and the report says so. The
//   collectives (over the groups of a 1 x 1 mesh: the only in-process
//   world is one rank) and the FP8 amax update are checked against their
//   definitions. Every opcode of the generated op table must be run and,
//   where it has results, have one checked: a new opcode fails here until
//   a program below covers it.
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

#include "TestProgram.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

using namespace moe::rt;

namespace {

/// Every draw of the suite derives from this seed; it is fixed so that the
/// suite cannot flake, and printed with every failure.
constexpr uint64_t kSeed = 0x5eed15;

/// Bit patterns no kernel writes by chance: a NaN with a payload, and an
/// id far outside every vocabulary and expert count.
constexpr uint32_t kPoisonBits = 0x7fc0dead;
constexpr int32_t kPoisonId = 0x7eadbeef;

/// The groups of a 1 x 1 mesh (makeMeshProgram with one rank): the
/// collectives and grouped reductions run over groups of one.
Program makeUnitMeshProgram() {
  return moe::rt::testing::makeMeshProgram({/*dp=*/1, /*tp=*/1});
}

/// Experts over a 1 x 1 dp x ep mesh with delayed FP8 scaling (recipe 3,
/// block 128, no FP8 dispatch) and an amax history, whose step ends with
/// Fp8AmaxUpdate over the {dp} group.
Program makeDelayedFp8Program() {
  using namespace moe::rt::testing;
  constexpr int64_t kLocalExperts = 3, kHistoryLength = 4;
  Program program = makeExpertParallelProgram({1, 1, kLocalExperts, 3});
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

struct NamedProgram {
  const char *name;
  Program (*make)();
  /// Targets are drawn below this (0: the vocabulary).
  int32_t targetLimit = 0;
};

const NamedProgram kPrograms[] = {
    {"tiny", [] { return moe::rt::testing::makeTinyProgram(); }},
    {"moe", [] { return moe::rt::testing::makeMoeProgram(); }},
    {"moe-capacity",
     [] {
       moe::rt::testing::MoeConfig config;
       config.capacityFactor = 1.0f;
       return moe::rt::testing::makeMoeProgram(config);
     }},
    {"swiglu", makeSwigluProgram},
    {"unit-mesh", makeUnitMeshProgram},
    // Its loss reads the experts' output as logits over the hidden size.
    {"delayed-fp8", makeDelayedFp8Program,
     moe::rt::testing::ExpertParallelSizes::kHidden}};

/// Ids drawn afresh from `seed`, below `limit`.
std::vector<int32_t> randomIds(int32_t limit, int64_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int32_t> id(0, limit - 1);
  std::vector<int32_t> ids(count);
  for (int32_t &each : ids)
    each = id(random);
  return ids;
}

/// The seeds of one program's weights and of each step's batch.
struct Seeds {
  uint64_t weights, tokens, targets;
};
Seeds seedsFor(size_t programIndex, int64_t step) {
  std::seed_seq sequence{kSeed, static_cast<uint64_t>(programIndex),
                         static_cast<uint64_t>(step)};
  std::vector<uint32_t> words(6);
  sequence.generate(words.begin(), words.end());
  auto join = [&](int i) {
    return (static_cast<uint64_t>(words[2 * i]) << 32) | words[2 * i + 1];
  };
  return {join(0), join(1), join(2)};
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

std::vector<uint8_t> copyOf(const Executor &executor, uint32_t b) {
  auto [data, size] = bytesOf(executor, b);
  return std::vector<uint8_t>(data, data + size);
}

/// What the runs saw, over all programs.
struct Coverage {
  std::set<Opcode> run;
  /// Results checked written, and in place (not poisoned), per opcode.
  std::map<Opcode, int64_t> checked, inPlace;
  /// Instructions checked against their definition, per opcode.
  std::map<Opcode, int64_t> defined;
};

/// Checks the instructions whose definition is simple on groups of one:
/// each collective gives its operand (the sum, concatenation or block of
/// one rank), and the amax update rolls each history row ([0] cleared, the
/// rest one older), and AdamW updates its parameter and moments as
/// torch.optim.AdamW does (in double, to fp32 rounding). `operands` holds
/// the operands as the instruction found them; returns the failures.
std::vector<std::string>
checkDefinition(const Executor &executor, const Instruction &inst,
                const std::vector<std::vector<uint8_t>> &operands,
                const std::string &where) {
  const Program &program = executor.program();
  std::vector<std::string> failures;
  switch (inst.opcode) {
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::Slice: {
    std::vector<uint8_t> after = copyOf(executor, inst.results[0]);
    if (after != operands[0])
      failures.push_back(absl::StrCat(
          where, ": over a group of one rank '",
          program.buffers[inst.results[0]].name, "' is not '",
          program.buffers[inst.operands[0]].name, "' bit for bit"));
    break;
  }
  case Opcode::Fp8AmaxUpdate: {
    const Buffer &buffer = program.buffers[inst.operands[0]];
    int64_t length = buffer.shape[2];
    std::vector<float> old(buffer.numElements());
    std::memcpy(old.data(), operands[0].data(), operands[0].size());
    const float *now = executor.data(inst.operands[0]);
    for (int64_t i = 0; i < buffer.numElements(); ++i) {
      int64_t at = i % length;
      float expected = at == 0 ? 0.0f : old[i - 1];
      if (std::memcmp(&now[i], &expected, sizeof(float)) != 0) {
        failures.push_back(absl::StrCat(where, ": '", buffer.name, "' [", i,
                                        "] is ", now[i], ", not ", expected,
                                        " (the history rolled by one)"));
        break;
      }
    }
    break;
  }
  case Opcode::AdamW: {
    ops::AdamWView op(inst);
    const Buffer &param = program.buffers[op.param()];
    auto old = [&](int operand, int64_t i) {
      float value;
      std::memcpy(&value, operands[operand].data() + i * sizeof(float),
                  sizeof(float));
      return static_cast<double>(value);
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

/// Two steps of program `programIndex` on the CPU backend, each
/// instruction's results poisoned first and checked after.
void checkEveryElementWritten(size_t programIndex, Coverage &coverage) {
  const NamedProgram &named = kPrograms[programIndex];
  const std::string name = named.name;
  std::shared_ptr<const Program> shared =
      std::make_shared<const Program>(named.make());
  const Program &program = *shared;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      createBackend("cpu", shared, {});
  ASSERT_TRUE(backend.ok()) << name << ": " << backend.status();
  Seeds first = seedsFor(programIndex, 0);
  ASSERT_TRUE((*backend)->initialize(first.weights).ok());
  // The hooks write into the host step's buffers between instructions.
  Executor &executor = const_cast<Executor &>(*(*backend)->hostStep());
  StepHooks hooks;
  std::vector<std::string> failures;
  std::set<std::string> inPlaceLines;
  std::vector<std::vector<uint8_t>> operandsBefore;
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
      ++coverage.inPlace[inst.opcode];
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
           checkDefinition(executor, inst, operandsBefore, where(index, inst)))
        failures.push_back(std::move(each));
    }
  };
  int32_t targetLimit =
      named.targetLimit ? named.targetLimit
                        : static_cast<int32_t>(program.model.vocab);
  for (int64_t step = 0; step < 2; ++step) {
    at = absl::StrCat("step ", step, ", ");
    Seeds seeds = seedsFor(programIndex, step);
    int64_t count = (*backend)->tokensPerStep();
    std::vector<int32_t> tokens =
        randomIds(static_cast<int32_t>(program.model.vocab), count,
                  seeds.tokens);
    std::vector<int32_t> targets = randomIds(targetLimit, count, seeds.targets);
    absl::StatusOr<StepResult> result =
        (*backend)->runStep(tokens.data(), targets.data(), step, hooks);
    // An unwritten element is the first thing to know of a failed step.
    for (const std::string &each : failures)
      ADD_FAILURE() << each;
    ASSERT_TRUE(failures.empty());
    ASSERT_TRUE(result.ok()) << name << ": " << result.status();
  }
  if (!inPlaceLines.empty())
    std::printf("%s: in place, so not poisoned: %s\n", name.c_str(),
                absl::StrJoin(inPlaceLines, ", ").c_str());
}

/// The opcodes of the op table the runs did not cover: never run, or with
/// results of which none was checked written (nor written in place).
std::vector<std::string> uncovered(const Coverage &coverage) {
  std::vector<std::string> missing;
  for (const ops::OpInfo &info : ops::kOpTable) {
    if (!coverage.run.count(info.opcode))
      missing.push_back(absl::StrCat(info.name, " (never run)"));
    else if (info.numResults > 0 && !coverage.checked.count(info.opcode) &&
             !coverage.inPlace.count(info.opcode))
      missing.push_back(absl::StrCat(info.name, " (no result checked)"));
    else if (info.numResults == 0 && !info.inPlace &&
             !coverage.defined.count(info.opcode))
      missing.push_back(
          absl::StrCat(info.name, " (no result, no definition check)"));
  }
  return missing;
}

/// A device backend's step against the CPU's, from the same weights.
void checkAgainstCpu(const std::string &backendName, size_t programIndex) {
  const NamedProgram &named = kPrograms[programIndex];
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
  Seeds seeds = seedsFor(programIndex, 0);
  ASSERT_TRUE((*cpu)->initialize(seeds.weights).ok());
  ASSERT_TRUE((*device)->initialize(seeds.weights).ok());
  int64_t count = (*cpu)->tokensPerStep();
  std::vector<int32_t> tokens = randomIds(
      static_cast<int32_t>(program.model.vocab), count, seeds.tokens);
  std::vector<int32_t> targets = randomIds(
      named.targetLimit ? named.targetLimit
                        : static_cast<int32_t>(program.model.vocab),
      count, seeds.targets);
  absl::StatusOr<StepResult> expected =
      (*cpu)->runStep(tokens.data(), targets.data(), 0, {});
  absl::StatusOr<StepResult> actual =
      (*device)->runStep(tokens.data(), targets.data(), 0, {});
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

/// The programs a device backend runs whole steps of: the single-rank
/// ones (the CUDA backend runs no mesh program without its world).
constexpr size_t kDevicePrograms = 3;

class ConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceTest, EveryOpcode) {
  SCOPED_TRACE(::testing::Message()
               << "conformance seed 0x" << std::hex << kSeed);
  const std::string &backendName = GetParam();
  if (backendName == "cpu") {
    Coverage coverage;
    for (size_t i = 0; i < std::size(kPrograms); ++i) {
      checkEveryElementWritten(i, coverage);
      if (HasFatalFailure())
        return;
    }
    std::vector<std::string> missing = uncovered(coverage);
    EXPECT_TRUE(missing.empty())
        << "opcodes of the op table no conformance program covers: "
        << absl::StrJoin(missing, ", ");
    return;
  }
  for (size_t i = 0; i < kDevicePrograms; ++i) {
    checkAgainstCpu(backendName, i);
    if (IsSkipped() || HasFatalFailure())
      return;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest,
                         ::testing::ValuesIn(backendNames()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param;
                         });

} // namespace
