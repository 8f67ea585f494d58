//===- PipelineSplit.cpp - tag the step with pipeline stages and phases ---===//
//
// The runtime runs a pipelined step per (model stage, phase, microbatch) in
// the order of a schedule. This file decides, for every op of one
// microbatch's step, which stage and phase runs it, and checks that the
// schedule's order then computes every value before it is read.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_SPLITPIPELINESTAGES
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

using PipelinePhase = ::moe::pipeline::Phase;

StringRef mlir::moe::toString(PipelinePhase phase) {
  switch (phase) {
  case PipelinePhase::Forward:
    return "forward";
  case PipelinePhase::Backward:
    return "backward";
  case PipelinePhase::BackwardWeight:
    return "weight";
  case PipelinePhase::Optimizer:
    return "optimizer";
  }
  llvm_unreachable("unknown pipeline phase");
}

namespace {

bool isOptimizerOp(Operation *op) {
  return isa<AdamWUpdateOp, GlobalNormOp, ClipCoefficientOp, LearningRateOp,
             Fp8AmaxUpdateOp, ExpertLoadUpdateOp>(op);
}

class StageSplitter {
public:
  StageSplitter(func::FuncOp step, unsigned layers,
                ArrayRef<unsigned> unitStages, unsigned ranks,
                bool splitWeightGradients)
      : step(step), layers(layers), unitStages(unitStages), ranks(ranks),
        splitWeightGradients(splitWeightGradients) {}

  LogicalResult run();

private:
  void assignPhases();
  void splitWeights();
  LogicalResult assignStages();
  LogicalResult assignOptimizerStages();
  LogicalResult shareParameter(AdamWUpdateOp update, int64_t first,
                               int64_t second);
  LogicalResult checkOrder();
  void moveWeightGradients();
  void hoistUnnamedOps();
  void deferGradientReductions();

  /// Fills `ops` in block order.
  void collectOps() {
    ops.clear();
    for (Operation &op : step.getBody().front().without_terminator())
      if (!isa<GetParamOp>(op))
        ops.push_back(&op);
  }

  /// The first optimizer op in block order (after every microbatch op),
  /// or null.
  Operation *firstOptimizerOp() const {
    for (Operation *op : ops)
      if (phase.lookup(op) == PipelinePhase::Optimizer)
        return op;
    return nullptr;
  }

  /// The tagged op defining `value`, or null (arguments, parameters).
  Operation *taggedDefiningOp(Value value) const {
    Operation *def = value.getDefiningOp();
    return def && phase.count(def) ? def : nullptr;
  }

  func::FuncOp step;
  unsigned layers;
  ArrayRef<unsigned> unitStages;
  unsigned ranks;
  bool splitWeightGradients;
  /// Every op but get_param and the return, in block order.
  SmallVector<Operation *> ops;
  DenseMap<Operation *, PipelinePhase> phase;
  DenseMap<Operation *, int64_t> stage;
};

void StageSplitter::assignPhases() {
  collectOps();
  llvm::SetVector<Operation *> forward = forwardOps(step);
  for (Operation *op : ops)
    phase[op] = isOptimizerOp(op)   ? PipelinePhase::Optimizer
                : forward.count(op) ? PipelinePhase::Forward
                                    : PipelinePhase::Backward;
}

void StageSplitter::splitWeights() {
  // Weight gradients, and what is computed from them alone, as long as
  // only weight-gradient or optimizer ops read the result.
  for (Operation *op : ops) {
    if (phase[op] != PipelinePhase::Backward)
      continue;
    bool fromWeights = isa<LinearGradWeightOp>(op);
    for (Value operand : op->getOperands())
      if (Operation *def = taggedDefiningOp(operand))
        fromWeights |= phase[def] == PipelinePhase::BackwardWeight;
    if (fromWeights)
      phase[op] = PipelinePhase::BackwardWeight;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : llvm::reverse(ops)) {
      if (phase[op] != PipelinePhase::BackwardWeight)
        continue;
      for (Operation *user : op->getUsers())
        if (!isa<func::ReturnOp>(user) &&
            phase.lookup(user) != PipelinePhase::BackwardWeight &&
            phase.lookup(user) != PipelinePhase::Optimizer) {
          phase[op] = PipelinePhase::Backward;
          changed = true;
          break;
        }
    }
  }
}

LogicalResult StageSplitter::assignStages() {
  for (Operation *op : ops) {
    if (phase[op] == PipelinePhase::Optimizer)
      continue;
    if (std::optional<unsigned> unit = pipelineUnitOf(op->getLoc(), layers)) {
      if (*unit >= unitStages.size())
        return op->emitOpError()
               << "belongs to pipeline unit " << *unit << ", but only "
               << unitStages.size() << " units have a stage";
      stage[op] = unitStages[*unit];
    }
  }
  // Unnamed ops join the stage their operands flow from: the last for a
  // forward value (it goes on to later stages), the first for a gradient
  // (it goes back to earlier ones); failing that, the stage of their users.
  auto fromOperands = [&](Operation *op) -> std::optional<int64_t> {
    bool forward = phase[op] == PipelinePhase::Forward;
    std::optional<int64_t> result;
    for (Value operand : op->getOperands()) {
      Operation *def = taggedDefiningOp(operand);
      if (!def || !stage.count(def) ||
          (!forward && phase[def] == PipelinePhase::Forward))
        continue;
      int64_t s = stage[def];
      result = !result ? s : forward ? std::max(*result, s)
                                     : std::min(*result, s);
    }
    return result;
  };
  auto fromUsers = [&](Operation *op) -> std::optional<int64_t> {
    bool forward = phase[op] == PipelinePhase::Forward;
    std::optional<int64_t> result;
    for (Operation *user : op->getUsers()) {
      if (!stage.count(user) || phase.lookup(user) == PipelinePhase::Optimizer)
        continue;
      int64_t s = stage[user];
      result = !result ? s : forward ? std::min(*result, s)
                                     : std::max(*result, s);
    }
    return result;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : ops)
      if (phase[op] != PipelinePhase::Optimizer && !stage.count(op))
        if (std::optional<int64_t> s = fromOperands(op)) {
          stage[op] = *s;
          changed = true;
        }
    for (Operation *op : llvm::reverse(ops))
      if (phase[op] != PipelinePhase::Optimizer && !stage.count(op))
        if (std::optional<int64_t> s = fromUsers(op)) {
          stage[op] = *s;
          changed = true;
        }
  }
  // What is left reads and feeds nothing staged (dead code): stage 0.
  for (Operation *op : ops)
    if (phase[op] != PipelinePhase::Optimizer && !stage.count(op))
      stage[op] = 0;
  return assignOptimizerStages();
}

LogicalResult StageSplitter::assignOptimizerStages() {
  // A parameter lives on the stages that read it; its AdamW runs there. The
  // forward of a BF16 step reads the working copy its AdamW rounds.
  DenseMap<Attribute, AdamWUpdateOp> updateOf;
  for (Operation *op : ops)
    if (auto update = dyn_cast<AdamWUpdateOp>(op)) {
      updateOf[update.getParamAttr().getAttr()] = update;
      if (FlatSymbolRefAttr copy = update.getWorkingCopyAttr())
        updateOf[copy.getAttr()] = update;
    }
  DenseMap<Attribute, int64_t> paramStage;
  // Parameters two stages read (tied embeddings): the update, the stage
  // reading it first and the other one.
  SmallVector<std::tuple<AdamWUpdateOp, int64_t, int64_t>> shared;
  for (Operation *op : ops) {
    if (!stage.count(op))
      continue;
    SmallVector<FlatSymbolRefAttr> params;
    for (Value operand : op->getOperands())
      if (auto read = operand.getDefiningOp<GetParamOp>())
        params.push_back(read.getParamAttr());
    // Delayed FP8 scaling's amax history, read and updated in place, and
    // a router's load counter.
    if (auto history = op->getAttrOfType<FlatSymbolRefAttr>("fp8_history"))
      params.push_back(history);
    if (auto counter = dyn_cast<ExpertLoadOp>(op))
      params.push_back(counter.getLoadAttr());
    for (FlatSymbolRefAttr param : params) {
      auto [it, inserted] = paramStage.try_emplace(param.getAttr(), stage[op]);
      if (inserted || it->second == stage[op])
        continue;
      AdamWUpdateOp update = updateOf.lookup(param.getAttr());
      auto second = llvm::find_if(
          shared, [&](auto &entry) { return std::get<0>(entry) == update; });
      if (update && second == shared.end()) {
        shared.emplace_back(update, it->second, stage[op]);
        continue;
      }
      if (update && std::get<2>(*second) == stage[op])
        continue;
      // A third stage, or state that no AdamW updates (an amax history, a
      // load counter), which only one stage can move.
      return op->emitOpError()
             << "reads " << param << " on pipeline stage " << stage[op]
             << ", which stage " << it->second
             << (update ? " and stage " + std::to_string(std::get<2>(*second))
                        : std::string())
             << " read" << (update ? "" : "s")
             << " too: a parameter lives on one stage, or on two that sum "
                "their halves of its gradient";
    }
  }
  for (auto [update, first, second] : shared)
    if (failed(shareParameter(update, first, second)))
      return failure();
  for (Operation *op : ops) {
    if (phase[op] != PipelinePhase::Optimizer || stage.count(op))
      continue;
    if (auto history = dyn_cast<Fp8AmaxUpdateOp>(op)) {
      auto it = paramStage.find(history.getHistoryAttr().getAttr());
      if (it == paramStage.end())
        return history.emitOpError()
               << "updates " << history.getHistoryAttr()
               << ", which no pipeline stage reads";
      stage[op] = it->second;
      continue;
    }
    // A load update runs with its counter (and the router's bias).
    if (auto update = dyn_cast<ExpertLoadUpdateOp>(op)) {
      auto it = paramStage.find(update.getLoadAttr().getAttr());
      if (it == paramStage.end())
        return update.emitOpError() << "updates " << update.getLoadAttr()
                                    << ", which no pipeline stage counts into";
      stage[op] = it->second;
      continue;
    }
    auto update = dyn_cast<AdamWUpdateOp>(op);
    if (!update) {
      stage[op] = -1;
      continue;
    }
    auto it = paramStage.find(update.getParamAttr().getAttr());
    if (FlatSymbolRefAttr copy = update.getWorkingCopyAttr();
        it == paramStage.end() && copy)
      it = paramStage.find(copy.getAttr());
    Operation *grad = taggedDefiningOp(update.getGrad());
    if (it != paramStage.end())
      stage[op] = it->second;
    else if (grad && stage.count(grad))
      stage[op] = stage[grad];
    else
      return update.emitOpError()
             << "updates " << update.getParamAttr()
             << ", which no pipeline stage reads or differentiates";
  }
  return success();
}

/// A parameter that stages `first` and `second` both read (the embedding
/// table that the LM head reads too) lives on both, as Megatron keeps the
/// tied embedding on its first and last stage. Each stage differentiates
/// its own use, and autodiff adds the two halves: that add becomes a
/// moe.pipeline_gradient_sum in the optimizer of each stage, on the halves
/// summed over the microbatches and reduced over each stage's data-parallel
/// ranks, and the AdamW is cloned for `second`. Both stages then update
/// their copy with the same bits. The global norm reads `first`'s sum, so
/// the parameter counts once.
LogicalResult StageSplitter::shareParameter(AdamWUpdateOp update, int64_t first,
                                            int64_t second) {
  // The reductions between the sum and the update, innermost first.
  SmallVector<Operation *> reductions;
  Operation *def = update.getGrad().getDefiningOp();
  while (def && isa<AllReduceOp, ReduceScatterOp>(def)) {
    reductions.insert(reductions.begin(), def);
    def = def->getOperand(0).getDefiningOp();
  }
  auto halves = dyn_cast_or_null<AddOp>(def);
  auto stageOf = [&](Value value) -> std::optional<int64_t> {
    Operation *producer = taggedDefiningOp(value);
    if (!producer || !stage.count(producer) ||
        phase[producer] == PipelinePhase::Forward)
      return std::nullopt;
    return stage[producer];
  };
  std::optional<int64_t> lhsStage, rhsStage;
  if (halves) {
    lhsStage = stageOf(halves.getLhs());
    rhsStage = stageOf(halves.getRhs());
  }
  bool oneEach = lhsStage && rhsStage &&
                 ((*lhsStage == first && *rhsStage == second) ||
                  (*lhsStage == second && *rhsStage == first));
  if (!oneEach)
    return update.emitOpError()
           << "updates " << update.getParamAttr() << ", which pipeline stages "
           << first << " and " << second
           << " both read, but its gradient is not the sum of one half from "
              "each: stages share a parameter only so";
  // Each step of the chain feeds the next only, and the last one the
  // update and the global norm: what is cloned is all that reads it.
  SmallVector<Operation *> chain{halves.getOperation()};
  chain.append(reductions.begin(), reductions.end());
  for (auto [index, op] : llvm::enumerate(chain)) {
    Operation *next =
        index + 1 < chain.size() ? chain[index + 1] : update.getOperation();
    bool feedsOnlyNext = llvm::all_of(op->getUsers(), [&](Operation *user) {
      return user == next ||
             (index + 1 == chain.size() && isa<GlobalNormOp>(user));
    });
    if (!feedsOnlyNext)
      return op->emitOpError()
             << "computes the gradient of " << update.getParamAttr()
             << ", which two pipeline stages share, for more than its update";
  }

  // The optimizer's ops run after every microbatch op (the global norm is
  // the first of them).
  OpBuilder builder(firstOptimizerOp());
  auto place = [&](Operation *op, int64_t at) {
    phase[op] = PipelinePhase::Optimizer;
    stage[op] = at;
  };
  // Each stage reduces its own half over its data-parallel ranks (the
  // reductions are linear), so the stages exchange reduced halves: an FSDP
  // rank sends its shard, not the whole table.
  auto reduced = [&](Value half, int64_t at) {
    IRMapping map;
    map.map(halves.getResult(), half);
    for (Operation *reduction : reductions) {
      Operation *copy = builder.clone(*reduction, map);
      place(copy, at);
      map.map(reduction->getResult(0), copy->getResult(0));
    }
    return map.lookup(update.getGrad());
  };
  Value lhs = reduced(halves.getLhs(), *lhsStage);
  Value rhs = reduced(halves.getRhs(), *rhsStage);
  auto sumFirst =
      builder.create<PipelineGradientSumOp>(halves.getLoc(), lhs, rhs);
  place(sumFirst, first);
  auto sumSecond =
      builder.create<PipelineGradientSumOp>(halves.getLoc(), lhs, rhs);
  place(sumSecond, second);
  update.getGrad().replaceAllUsesWith(sumFirst.getResult());
  builder.setInsertionPointAfter(update);
  auto updateSecond = cast<AdamWUpdateOp>(builder.clone(*update));
  updateSecond.getGradMutable().assign(sumSecond.getResult());
  place(update, first);
  place(updateSecond, second);
  // The whole-gradient chain has no users left.
  for (Operation *op : llvm::reverse(chain)) {
    phase.erase(op);
    stage.erase(op);
    op->erase();
  }
  collectOps();
  return success();
}

LogicalResult StageSplitter::checkOrder() {
  for (Operation *op : ops) {
    PipelinePhase to = phase[op];
    if (auto update = dyn_cast<AdamWUpdateOp>(op)) {
      Operation *grad = taggedDefiningOp(update.getGrad());
      if (grad && (phase[grad] == PipelinePhase::Forward ||
                   stage[grad] != stage[op]))
        return update.emitOpError()
               << "reads its gradient from the " << toString(phase[grad])
               << " of pipeline stage " << stage[grad]
               << ", expected a backward of stage " << stage[op];
      continue;
    }
    for (Value operand : op->getOperands()) {
      Operation *def = taggedDefiningOp(operand);
      if (!def)
        continue;
      PipelinePhase from = phase[def];
      if (to == PipelinePhase::Optimizer) {
        // Gradients summed over the microbatches are read where they are
        // computed (the global norm skips other stages' gradients, and a
        // stage sum receives the other stage's half).
        bool sameStage = stage[def] == stage[op] || stage[def] < 0 ||
                         isa<GlobalNormOp, PipelineGradientSumOp>(op);
        if ((from == PipelinePhase::Forward) || !sameStage)
          return op->emitOpError()
                 << "in the optimizer of pipeline stage " << stage[op]
                 << " reads a value of the " << toString(from)
                 << " of stage " << stage[def];
        continue;
      }
      if (!::moe::pipeline::runsBefore(stage[def], from, stage[op], to))
        return op->emitOpError()
               << "in the " << toString(to) << " of pipeline stage "
               << stage[op] << " reads a value of the " << toString(from)
               << " of stage " << stage[def]
               << ", which a pipeline schedule runs later";
    }
  }
  return success();
}

void StageSplitter::moveWeightGradients() {
  // Each stage's weight ops go after its last backward op, in their order.
  DenseMap<int64_t, Operation *> lastBackward;
  for (Operation *op : ops)
    if (phase[op] == PipelinePhase::Backward)
      lastBackward[stage[op]] = op;
  DenseMap<int64_t, Operation *> insertAfter = lastBackward;
  for (Operation *op : ops) {
    if (phase[op] != PipelinePhase::BackwardWeight)
      continue;
    Operation *anchor = insertAfter.lookup(stage[op]);
    if (!anchor || !op->isBeforeInBlock(anchor))
      continue;
    op->moveAfter(anchor);
    insertAfter[stage[op]] = op;
  }
}

/// An unnamed op (a residual add, a gradient sum, a collective the
/// partitioner put where the optimizer needs it) runs in the action of the
/// stage it joined, so it moves next to the ops it reads: a rank then runs
/// its instructions in an order that is a subsequence of program order,
/// which the memory plan made afterwards holds for.
void StageSplitter::hoistUnnamedOps() {
  for (Operation *op : ops) {
    if (phase[op] == PipelinePhase::Optimizer ||
        pipelineUnitOf(op->getLoc(), layers))
      continue;
    Operation *last = nullptr;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (!last || last->isBeforeInBlock(def))
          last = def;
    if (last && last->getNextNode() != op)
      op->moveAfter(last);
  }
  // Later steps walk the ops in their new block order.
  collectOps();
}

/// A reduction of a gradient that only the optimizer reads (a data-parallel
/// all-reduce, an FSDP reduce-scatter) is linear, so it can run once on the
/// gradient summed over the microbatches instead of once per microbatch:
/// it joins the optimizer on its stage, before the global norm.
void StageSplitter::deferGradientReductions() {
  Operation *optimizerStart = firstOptimizerOp();
  if (!optimizerStart)
    return;
  for (Operation *op : ops) {
    if (!isa<AllReduceOp, ReduceScatterOp>(op) ||
        phase[op] == PipelinePhase::Forward ||
        phase[op] == PipelinePhase::Optimizer)
      continue;
    bool forOptimizerOnly = llvm::all_of(op->getUsers(), [&](Operation *user) {
      return isa<AdamWUpdateOp, GlobalNormOp, PipelineGradientSumOp>(user);
    });
    if (!forOptimizerOnly || op->use_empty())
      continue;
    phase[op] = PipelinePhase::Optimizer;
    op->moveBefore(optimizerStart);
  }
}

LogicalResult StageSplitter::run() {
  if (ranks == 0)
    return step.emitOpError() << "needs at least one pipeline rank";
  assignPhases();
  if (splitWeightGradients)
    splitWeights();
  if (failed(assignStages()))
    return failure();
  deferGradientReductions();
  if (failed(checkOrder()))
    return failure();
  hoistUnnamedOps();
  if (splitWeightGradients)
    moveWeightGradients();
  Builder builder(step.getContext());
  for (Operation *op : ops) {
    op->setAttr(kPipelineStageAttrName, builder.getI64IntegerAttr(stage[op]));
    op->setAttr(kPipelinePhaseAttrName,
                builder.getStringAttr(toString(phase[op])));
  }
  step->setAttr(kPipelineRanksAttrName, builder.getI64IntegerAttr(ranks));
  return success();
}

struct SplitPipelineStagesPass
    : public mlir::moe::impl::SplitPipelineStagesBase<SplitPipelineStagesPass> {
  using SplitPipelineStagesBase::SplitPipelineStagesBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName);
    auto layersAttr =
        model ? model.getAs<IntegerAttr>("layers") : IntegerAttr();
    if (!layersAttr) {
      module.emitError()
          << "pipeline stages need the model's layers (moe.transformer)";
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to split into pipeline stages");
    if (failed(step))
      return signalPassFailure();
    SmallVector<unsigned> stages(unitStages.begin(), unitStages.end());
    unsigned rankCount = ranks;
    bool splitWeights = splitWeightGradients;
    SmallVector<unsigned> slotCounts(slots.begin(), slots.end());
    if (stages.empty()) {
      FailureOr<std::optional<RecordedPipeline>> recorded =
          recordedPipeline(module);
      if (failed(recorded))
        return signalPassFailure();
      if (*recorded) {
        // The record says all of it; a value given besides would be
        // ignored. (A printed pipeline spells out the defaults.)
        if (ranks != 1 || splitWeightGradients || !slots.empty()) {
          module.emitError()
              << "ranks, slots and split-weight-gradients need unit-stages: "
                 "without it they come from the module's "
              << kPipelineScheduleAttrName;
          return signalPassFailure();
        }
        const ::moe::pipeline::Schedule &schedule = (*recorded)->schedule;
        stages.assign((*recorded)->unitStages.begin(),
                      (*recorded)->unitStages.end());
        rankCount = schedule.stages;
        splitWeights =
            schedule.kind == ::moe::pipeline::ScheduleKind::ZeroBubble;
        slotCounts.clear();
        for (int count : ::moe::pipeline::peakMicrobatchSlots(schedule))
          slotCounts.push_back(count);
      }
    }
    if (failed(splitPipelineStages(*step, layersAttr.getInt(), stages,
                                   rankCount, splitWeights)))
      return signalPassFailure();
    if (slotCounts.empty())
      return;
    if (slotCounts.size() != rankCount || llvm::is_contained(slotCounts, 0u)) {
      module.emitError() << "expected one positive slot count per pipeline "
                            "rank ("
                         << rankCount << "), got " << slotCounts.size();
      return signalPassFailure();
    }
    SmallVector<int64_t> counts(slotCounts.begin(), slotCounts.end());
    (*step)->setAttr(kPipelineSlotsAttrName,
                     DenseI64ArrayAttr::get(module.getContext(), counts));
  }
};

} // namespace

LogicalResult mlir::moe::splitPipelineStages(func::FuncOp step,
                                             unsigned layers,
                                             ArrayRef<unsigned> unitStages,
                                             unsigned ranks,
                                             bool splitWeightGradients) {
  return StageSplitter(step, layers, unitStages, ranks, splitWeightGradients)
      .run();
}
