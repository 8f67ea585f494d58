//===- Dataflow.cpp - checks across instructions and the memory plan ------===//
//
// Per-instruction checks cannot see a wrong schedule or a wrong memory plan.
// Both would make the step silently compute garbage, so they are errors:
//  - a temporary read before any instruction writes it reads stale arena
//    bytes (from another buffer, or from the previous step);
//  - persistent state is only changed in place through the operands of
//    the instructions that update it (AdamW, the FP8 amax and expert load
//    updates, each buffer by one), never as an instruction result;
//  - the expert ids consumed by Experts/ExpertsGrad index expert weights,
//    and those ExpertLoad counts index its counter, so they must come from
//    a Router over the same number of experts (all of the group's, when
//    the experts are distributed over one);
//  - two temporaries live at the same time must not share arena bytes;
//  - the global norm (which clips the update and is reported) reads exactly
//    the gradients the AdamW instructions apply, each once: a weight or a
//    missing gradient among its operands gives a wrong norm and clip.
// A temporary is live from its first write to its last use (read or write);
// the program's loss, grad norm and lr are read after the last instruction.
//
//===----------------------------------------------------------------------===//

#include "VerifierSupport.h"

#include "moe/Runtime/Artifact/ExpertsRecipe.h"
#include "moe/Runtime/Artifact/OpTable.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <tuple>

namespace moe::rt::verifier {
namespace {

constexpr size_t kNever = SIZE_MAX;

/// The table's entry for result `i` of `instruction` (a variadic last
/// entry covers every result from it on).
const ops::ValueInfo &resultInfo(const Instruction &instruction, size_t i) {
  const ops::OpInfo &info = ops::opInfo(instruction.opcode);
  return info.results[std::min(i, info.numResults - 1)];
}

/// Where a temporary's first write and last use fall, in instruction order.
struct LiveRange {
  size_t first = kNever;
  size_t last = 0;
};

struct Interval {
  uint32_t buffer;
  size_t first, last;
  uint64_t begin, end; // arena bytes [begin, end)
};

class DataflowChecker {
public:
  explicit DataflowChecker(const Program &program)
      : program(program), ranges(program.buffers.size()),
        expertIdsOf(program.buffers.size(), -1),
        optimizerUser(program.buffers.size(), kNever),
        writer(program.lastWriters()) {}

  absl::Status check() {
    MOE_VERIFY_OK(checkGradientNorm());
    for (size_t index = 0; index < program.instructions.size(); ++index)
      MOE_VERIFY_OK(visit(index));
    MOE_VERIFY_OK(checkOutputs());
    return checkArenaOverlap();
  }

private:
  const Buffer &bufferAt(uint32_t index) const {
    return program.buffers[index];
  }

  /// Whether AdamW instructions `a` and `b` update the two copies of a
  /// parameter that two pipeline stages share (tied embeddings): they run
  /// on different pipeline ranks, each with the gradient its stage's
  /// PipelineGradientSum adds up (PipelineRules.cpp checks the pair).
  bool updateSharedCopies(size_t a, size_t b) const {
    const Pipeline &pipeline = program.pipeline;
    if (!pipeline.enabled())
      return false;
    auto summed = [&](size_t update) {
      const Instruction &adamw = program.instructions[update];
      if (!isAdamW(adamw.opcode))
        return false;
      int64_t w = writer[adamw.operands[ops::AdamWView::kGradOperand]];
      return w >= 0 &&
             program.instructions[w].opcode == Opcode::PipelineGradientSum;
    };
    int32_t stageA = pipeline.instructionStage[a];
    int32_t stageB = pipeline.instructionStage[b];
    return summed(a) && summed(b) && stageA >= 0 && stageB >= 0 &&
           stageA % pipeline.stages != stageB % pipeline.stages;
  }

  absl::Status visit(size_t index) {
    const Instruction &instruction = program.instructions[index];
    for (size_t i = 0; i < instruction.operands.size(); ++i) {
      uint32_t b = instruction.operands[i];
      if (bufferAt(b).kind != BufferKind::Temporary)
        continue;
      if (ranges[b].first == kNever)
        return instructionError(
            program, index,
            absl::StrCat("operand ", i, " (", describeBuffer(program, b),
                         ") is a temporary that no earlier instruction "
                         "writes (read of uninitialised arena memory)"));
      ranges[b].last = std::max(ranges[b].last, index);
    }
    MOE_VERIFY_OK(checkExpertIds(index));
    MOE_VERIFY_OK(checkOptimizerState(index));

    for (size_t i = 0; i < instruction.results.size(); ++i) {
      uint32_t b = instruction.results[i];
      const Buffer &buffer = bufferAt(b);
      if (buffer.kind != BufferKind::Temporary)
        return instructionError(
            program, index,
            absl::StrCat("result ", i, " (", describeBuffer(program, b),
                         ") is ", withArticle(buffer.kind),
                         "; only temporaries may be written as results"));
      for (size_t j = 0; j < i; ++j)
        if (instruction.results[j] == b)
          return instructionError(program, index,
                                  absl::StrCat("results ", j, " and ", i,
                                               " are the same ",
                                               describeBuffer(program, b)));
      auto &operands = instruction.operands;
      auto alias = std::find(operands.begin(), operands.end(), b);
      if (alias != operands.end() && !allowsInPlace(instruction.opcode))
        return instructionError(
            program, index,
            absl::StrCat("result ", i, " (", describeBuffer(program, b),
                         ") is also operand ", alias - operands.begin(),
                         ", but this kernel cannot work in place"));
      if (ranges[b].first == kNever)
        ranges[b].first = index;
      ranges[b].last = std::max(ranges[b].last, index);
      // Routers write expert ids; gathers and slices of ids (sequence
      // parallelism moves them between ranks) keep what they index.
      bool routerIds = (instruction.opcode == Opcode::Router &&
                        i == ops::RouterView::kIndicesResult) ||
                       (instruction.opcode == Opcode::ScoredRouter &&
                        i == ops::ScoredRouterView::kIndicesResult);
      if (routerIds)
        expertIdsOf[b] = bufferAt(instruction.operands[0]).shape.back();
      else if (resultInfo(instruction, i).dtypeOf >= 0 &&
               bufferAt(instruction.operands[0]).dtype == DType::I32)
        expertIdsOf[b] = expertIdsOf[instruction.operands[0]];
      else
        expertIdsOf[b] = -1;
    }
    return absl::OkStatus();
  }

  absl::Status checkExpertIds(size_t index) {
    const Instruction &instruction = program.instructions[index];
    size_t idsOperand;
    int64_t experts;
    if (instruction.opcode == Opcode::ExpertLoad) {
      // A load counter counts ids below its length.
      idsOperand = ops::ExpertLoadView::kIndicesOperand;
      experts =
          bufferAt(instruction.operands[ops::ExpertLoadView::kLoadOperand])
              .shape[0];
    } else if (std::optional<ops::ExpertsRecipe> recipe =
                   ops::expertsRecipeOf(instruction)) {
      // x, weights, indices, w1: the ids and w1 [E, F, H].
      idsOperand = recipe->firstOperand + 2;
      experts =
          bufferAt(instruction.operands[recipe->firstOperand + 3]).shape[0];
      // Expert parallel: the weights are this rank's experts, the ids
      // global (the instruction rules keep the product within int32).
      if (recipe->group)
        experts *= program.partsOf(program.groups[*recipe->group]);
    } else {
      return absl::OkStatus();
    }
    uint32_t ids = instruction.operands[idsOperand];
    if (expertIdsOf[ids] != experts)
      return instructionError(
          program, index,
          absl::StrCat("operand ", idsOperand, " (",
                       describeBuffer(program, ids),
                       ") must hold the expert ids of a Router over ", experts,
                       " experts"));
    return absl::OkStatus();
  }

  /// Each parameter, each moment buffer and each FP8 amax history belongs
  /// to exactly one update; sharing one would apply two steps or mix two
  /// parameters' statistics.
  absl::Status checkOptimizerState(size_t index) {
    const Instruction &instruction = program.instructions[index];
    std::vector<size_t> updated;
    if (isAdamW(instruction.opcode)) {
      updated = {ops::AdamWView::kParamOperand, ops::AdamWView::kExpAvgOperand,
                 ops::AdamWView::kExpAvgSqOperand};
      // The working copy of mixed precision, rounded from the update.
      if (instruction.operands.size() > ops::AdamWView::kWorkingOperand)
        updated.push_back(ops::AdamWView::kWorkingOperand);
    } else if (instruction.opcode == Opcode::Fp8AmaxUpdate) {
      updated = {ops::Fp8AmaxUpdateView::kHistoryOperand};
    } else if (instruction.opcode == Opcode::ExpertLoadUpdate) {
      updated = {ops::ExpertLoadUpdateView::kLoadOperand};
      if (instruction.operands.size() > ops::ExpertLoadUpdateView::kBiasOperand)
        updated.push_back(ops::ExpertLoadUpdateView::kBiasOperand);
    }
    for (size_t i : updated) {
      uint32_t b = instruction.operands[i];
      if (optimizerUser[b] != kNever &&
          !updateSharedCopies(optimizerUser[b], index))
        return instructionError(
            program, index,
            absl::StrCat("operand ", i, " (", describeBuffer(program, b),
                         ") is already updated by instruction ",
                         optimizerUser[b]));
      optimizerUser[b] = index;
    }
    return absl::OkStatus();
  }

  absl::Status checkGradientNorm() {
    // The gradient each AdamW applies, by buffer.
    constexpr size_t kGradOperand = ops::AdamWView::kGradOperand;
    std::map<uint32_t, size_t> applier;
    for (size_t index = 0; index < program.instructions.size(); ++index) {
      const Instruction &instruction = program.instructions[index];
      if (isAdamW(instruction.opcode))
        applier.emplace(instruction.operands[kGradOperand], index);
    }
    std::map<uint32_t, size_t> normed; // gradient -> GlobalNorm reading it
    size_t lastNorm = kNever;
    for (size_t index = 0; index < program.instructions.size(); ++index) {
      const Instruction &instruction = program.instructions[index];
      if (instruction.opcode != Opcode::GlobalNorm)
        continue;
      lastNorm = index;
      for (size_t i = 0; i < instruction.operands.size(); ++i) {
        uint32_t b = instruction.operands[i];
        if (!applier.count(b))
          return instructionError(
              program, index,
              absl::StrCat("operand ", i, " (", describeBuffer(program, b),
                           ", ", withArticle(bufferAt(b).kind),
                           ") is not a gradient: the norm reads the "
                           "gradients that AdamW instructions apply"));
        if (auto [it, inserted] = normed.emplace(b, index); !inserted)
          return instructionError(
              program, index,
              absl::StrCat("operand ", i, " (", describeBuffer(program, b),
                           ") is already in the norm of instruction ",
                           it->second));
      }
    }
    if (lastNorm == kNever)
      return absl::OkStatus();
    // Of a parameter two stages share, the norm counts one copy's gradient.
    auto normedCopy = [&](size_t update) {
      for (auto [grad, other] : applier)
        if (normed.count(grad) && updateSharedCopies(update, other) &&
            program.instructions[other].operands[0] ==
                program.instructions[update].operands[0])
          return true;
      return false;
    };
    for (auto [grad, index] : applier)
      if (!normed.count(grad) && !normedCopy(index))
        return instructionError(
            program, index,
            absl::StrCat("its gradient (", describeBuffer(program, grad),
                         ") is not an operand of the GlobalNorm (instruction ",
                         lastNorm, "), which would clip and report a norm "
                                   "without it"));
    return absl::OkStatus();
  }

  absl::Status checkOutputs() {
    size_t end = program.instructions.size();
    const std::pair<const char *, uint32_t> outputs[] = {
        {"loss", program.loss},
        {"grad_norm", program.gradNorm},
        {"lr", program.lr}};
    for (auto [name, b] : outputs) {
      if (ranges[b].first == kNever)
        return absl::InvalidArgumentError(absl::StrCat(
            "program field '", name, "' (", describeBuffer(program, b),
            "): no instruction writes it"));
      ranges[b].last = end;
    }
    return absl::OkStatus();
  }

  /// A result may take over the exact arena range of an operand that its
  /// instruction reads for the last time, if the kernel works in place.
  bool isInPlaceHandover(const Interval &dying, const Interval &born) const {
    if (dying.last != born.first || dying.begin != born.begin ||
        dying.end != born.end)
      return false;
    const Instruction &instruction = program.instructions[born.first];
    const auto &operands = instruction.operands;
    return allowsInPlace(instruction.opcode) &&
           std::find(operands.begin(), operands.end(), dying.buffer) !=
               operands.end();
  }

  absl::Status overlapError(const Interval &other, const Interval &born) {
    const Instruction &instruction = program.instructions[born.first];
    size_t result = std::find(instruction.results.begin(),
                              instruction.results.end(), born.buffer) -
                    instruction.results.begin();
    std::string until = other.last == program.instructions.size()
                            ? std::string("the end of the step")
                            : absl::StrCat("instruction ", other.last);
    return instructionError(
        program, born.first,
        absl::StrCat(
            "result ", result, " (", describeBuffer(program, born.buffer),
            ", arena [", born.begin, ", ", born.end, ")) overlaps ",
            describeBuffer(program, other.buffer), " (arena [", other.begin,
            ", ", other.end, ")), which is live from instruction ", other.first,
            " to ", until));
  }

  /// Sweep over the intervals in order of first write. The live set is kept
  /// sorted by arena offset; as its members never overlap each other, a new
  /// interval can only collide with its two neighbours in that order.
  /// A pipelined program runs each rank in its own arenas, so only the
  /// temporaries one rank holds must not overlap.
  absl::Status checkArenaOverlap() {
    std::vector<std::vector<bool>> holding = pipelineRanksHolding(program);
    size_t ranks = holding.empty() ? 1 : holding[0].size();
    for (size_t rank = 0; rank < ranks; ++rank)
      MOE_VERIFY_OK(checkArenaOverlap(holding, rank));
    return absl::OkStatus();
  }

  absl::Status checkArenaOverlap(const std::vector<std::vector<bool>> &holding,
                                 size_t rank) {
    std::vector<Interval> intervals;
    for (uint32_t b = 0; b < program.buffers.size(); ++b) {
      const Buffer &buffer = bufferAt(b);
      uint64_t size = buffer.sizeInBytes();
      if (buffer.kind != BufferKind::Temporary || ranges[b].first == kNever ||
          size == 0 || !holding[b][rank])
        continue;
      intervals.push_back({b, ranges[b].first, ranges[b].last, buffer.offset,
                           buffer.offset + size});
    }
    std::sort(intervals.begin(), intervals.end(),
              [](const Interval &a, const Interval &b) {
                return std::tie(a.first, a.buffer) <
                       std::tie(b.first, b.buffer);
              });

    std::map<uint64_t, size_t> live;          // arena begin -> interval
    using Expiry = std::pair<size_t, size_t>; // (last use, interval)
    std::priority_queue<Expiry, std::vector<Expiry>, std::greater<Expiry>>
        expiries;
    auto retire = [&](size_t id) {
      auto it = live.find(intervals[id].begin);
      if (it != live.end() && it->second == id)
        live.erase(it);
    };

    for (size_t id = 0; id < intervals.size(); ++id) {
      const Interval &born = intervals[id];
      while (!expiries.empty() && expiries.top().first < born.first) {
        retire(expiries.top().second);
        expiries.pop();
      }
      for (;;) {
        auto next = live.lower_bound(born.begin);
        size_t conflict = kNever;
        if (next != live.end() && intervals[next->second].begin < born.end)
          conflict = next->second;
        else if (next != live.begin() &&
                 intervals[std::prev(next)->second].end > born.begin)
          conflict = std::prev(next)->second;
        if (conflict == kNever)
          break;
        if (!isInPlaceHandover(intervals[conflict], born))
          return overlapError(intervals[conflict], born);
        retire(conflict);
      }
      live.emplace(born.begin, id);
      expiries.push({born.last, id});
    }
    return absl::OkStatus();
  }

  const Program &program;
  std::vector<LiveRange> ranges;
  // For int32 temporaries: the expert count of the Router that last wrote
  // them, or -1.
  std::vector<int64_t> expertIdsOf;
  // For parameters and optimizer state: the AdamW that updates them.
  std::vector<size_t> optimizerUser;
  // For each buffer, the last instruction writing it (-1: none).
  std::vector<int64_t> writer;
};

} // namespace

absl::Status verifyDataflow(const Program &program) {
  return DataflowChecker(program).check();
}

} // namespace moe::rt::verifier
