//===- Rematerialize.cpp - recompute activations to fit a memory budget ---===//
//
// The backward pass reads forward values ("saved activations"), which the
// memory plan keeps alive from the forward op that makes them to their last
// backward reader: that is what makes the arena's peak. Recomputing such a
// value right before its first backward reader frees it in between, at the
// price of running its op again.
//
// The choice is op-level and greedy: a forward op may be recomputed when it
// reads only weights, step inputs and other saved values (recomputed ones
// are read from their recomputation), so recomputing it never keeps another
// value alive longer. Candidates are ranked by recompute cost per saved byte
// (model FLOPs; an op without GEMM FLOPs costs its result elements), and the
// shortest prefix of that ranking whose memory plan fits the budget is
// found by bisection, each probe planning a scratch copy of the step.
//
// The experts' saved up projections (moe-save-expert-activations) are a
// candidate of their own: dropping them makes the backward recompute the
// two GEMMs that made them, not the whole op.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Format.h"

namespace mlir::moe {
#define GEN_PASS_DEF_REMATERIALIZE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

llvm::SetVector<Operation *> mlir::moe::forwardOps(func::FuncOp step) {
  llvm::SetVector<Operation *> forward;
  Block &body = step.getBody().front();
  SmallVector<Value> worklist{body.getTerminator()->getOperand(0)};
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (!def || isa<GetParamOp>(def) || !forward.insert(def))
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  // The forward's load counters feed no value, but read forward values
  // only and belong with them.
  for (auto counter : body.getOps<ExpertLoadOp>())
    if (Operation *def = counter.getIndices().getDefiningOp();
        def && forward.contains(def))
      forward.insert(counter);
  return forward;
}

/// Whether `user` belongs to the backward pass (or the optimizer) of the
/// step whose forward pass is `forward`: a reader that keeps a forward
/// value alive past the forward pass.
static bool isBackwardReader(Operation *user,
                             const llvm::SetVector<Operation *> &forward) {
  return !forward.contains(user) && !isa<func::ReturnOp>(user);
}

/// Whether the backward pass reads `value`, a forward value.
static bool isSavedActivation(Value value,
                              const llvm::SetVector<Operation *> &forward) {
  return llvm::any_of(value.getUsers(), [&](Operation *user) {
    return isBackwardReader(user, forward);
  });
}

uint64_t mlir::moe::savedActivationBytes(func::FuncOp step) {
  llvm::SetVector<Operation *> forward = forwardOps(step);
  uint64_t bytes = 0;
  for (Operation *op : forward)
    for (Value result : op->getResults())
      if (isSavedActivation(result, forward))
        bytes += tensorBytes(result.getType());
  return bytes;
}

namespace {

/// A forward op whose saved results could be recomputed.
struct Candidate {
  Operation *op;
  uint64_t savedBytes;
  double cost;  // for ranking: model FLOPs, or result elements
  double flops; // model FLOPs
};

class Rematerializer {
public:
  explicit Rematerializer(func::FuncOp step)
      : step(step), forward(forwardOps(step)) {}

  /// The candidates, cheapest recompute per saved byte first.
  std::vector<Candidate> candidates();

  /// Recomputes the chosen forward ops (of one function) right before their
  /// backward readers, which then read the recomputation, and drops the
  /// chosen saved up projections.
  static void apply(ArrayRef<Operation *> chosen);

  func::FuncOp step;
  llvm::SetVector<Operation *> forward;

private:
  bool isSaved(Value value) const { return isSavedActivation(value, forward); }

  /// In a pipelined step, an op is recomputed in the backward of its own
  /// stage, where its weights and inputs are: every backward reader must be
  /// on that stage. (A value another stage reads travels there once.)
  bool recomputableOnItsStage(Operation *op) const {
    auto stage = op->getAttrOfType<IntegerAttr>(kPipelineStageAttrName);
    if (!stage)
      return true;
    for (Value result : op->getResults())
      for (Operation *user : result.getUsers())
        if (isBackwardReader(user, forward) &&
            user->getAttr(kPipelineStageAttrName) != stage)
          return false;
    return true;
  }
};

/// Experts whose saved up projections only their gradients read: dropping
/// them is the candidate, not recomputing the op.
static bool keepsDroppableHidden(Operation *op) {
  auto experts = dyn_cast<ExpertsOp>(op);
  return experts && experts.getHidden() &&
         llvm::all_of(experts.getHidden().getUsers(),
                      [](Operation *user) { return isa<ExpertsGradOp>(user); });
}

std::vector<Candidate> Rematerializer::candidates() {
  std::vector<Candidate> result;
  for (Operation *op : forward) {
    if (keepsDroppableHidden(op)) {
      Value hidden = cast<ExpertsOp>(op).getHidden();
      if (!isSaved(hidden))
        continue;
      // Two of the op's three GEMMs.
      double flops = modelFlops(op) * 2.0 / 3.0;
      result.push_back({op, tensorBytes(hidden.getType()), flops, flops});
      continue;
    }
    if (isa<ExpertsOp>(op) && cast<ExpertsOp>(op).getHidden())
      continue;
    uint64_t saved = 0;
    double elements = 0;
    for (Value value : op->getResults()) {
      elements += cast<ShapedType>(value.getType()).getNumElements();
      if (isSaved(value))
        saved += tensorBytes(value.getType());
    }
    if (saved == 0)
      continue;
    // Recomputing must not keep alive what would otherwise die: the op may
    // read weights, the step's inputs and saved values only.
    bool readsSavedOnly = llvm::all_of(op->getOperands(), [&](Value operand) {
      Operation *def = operand.getDefiningOp();
      return !def || isa<GetParamOp>(def) || isSaved(operand);
    });
    if (!readsSavedOnly || !recomputableOnItsStage(op))
      continue;
    double flops = modelFlops(op);
    result.push_back({op, saved, flops > 0 ? flops : elements, flops});
  }
  std::stable_sort(result.begin(), result.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.cost / a.savedBytes < b.cost / b.savedBytes;
                   });
  return result;
}

void Rematerializer::apply(ArrayRef<Operation *> candidates) {
  if (candidates.empty())
    return;
  auto step = candidates.front()->getParentOfType<func::FuncOp>();
  // Saved up projections are dropped in place (the ops are rebuilt, so the
  // forward pass is found after); the rest are recomputed.
  SmallVector<Operation *> chosen;
  for (Operation *op : candidates) {
    if (keepsDroppableHidden(op))
      dropExpertActivations(cast<ExpertsOp>(op));
    else
      chosen.push_back(op);
  }
  if (chosen.empty())
    return;
  llvm::SetVector<Operation *> forward = forwardOps(step);
  llvm::SetVector<Operation *> set(chosen.begin(), chosen.end());
  // Where each recomputation goes: before its first backward reader, or
  // before the recomputation of a chosen op that reads it, if earlier.
  // Chosen ops in reverse block order, so that readers come first.
  SmallVector<Operation *> ordered(chosen.begin(), chosen.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  DenseMap<Operation *, Operation *> anchor;
  for (Operation *op : llvm::reverse(ordered)) {
    Operation *first = nullptr;
    auto consider = [&](Operation *position) {
      if (!first || position->isBeforeInBlock(first))
        first = position;
    };
    for (Operation *user : op->getUsers()) {
      if (set.contains(user))
        consider(anchor.lookup(user));
      else if (isBackwardReader(user, forward))
        consider(user);
    }
    anchor[op] = first;
  }
  // Clones in block order, each reading earlier clones.
  IRMapping recomputed;
  OpBuilder builder(ordered.front()->getContext());
  for (Operation *op : ordered) {
    Operation *position = anchor.lookup(op);
    builder.setInsertionPoint(position);
    Operation *clone = builder.clone(*op, recomputed);
    clone->setAttr(kRecomputedAttrName, builder.getUnitAttr());
    // Pipelined: the recomputation runs in the action of the op it
    // precedes, a backward (or weight-gradient) pass of the same stage.
    if (Attribute phase = position->getAttr(kPipelinePhaseAttrName))
      clone->setAttr(kPipelinePhaseAttrName, phase);
    for (auto [original, copy] :
         llvm::zip(op->getResults(), clone->getResults()))
      original.replaceUsesWithIf(copy, [&](OpOperand &use) {
        Operation *user = use.getOwner();
        return user != clone && isBackwardReader(user, forward) &&
               !user->hasAttr(kRecomputedAttrName);
      });
  }
}

/// The arena the step needs with the first `count` candidates recomputed,
/// planned on a scratch copy of the step.
FailureOr<uint64_t> arenaWith(func::FuncOp step,
                              ArrayRef<Candidate> candidates, size_t count) {
  IRMapping mapping;
  OpBuilder builder(step);
  auto copy = cast<func::FuncOp>(builder.clone(*step, mapping));
  SmallVector<Operation *> chosen;
  for (size_t i = 0; i < count; ++i)
    chosen.push_back(mapping.lookup(candidates[i].op));
  if (!chosen.empty())
    Rematerializer::apply(chosen);
  FailureOr<MemoryPlan> plan = planMemory(copy);
  copy.erase();
  if (failed(plan))
    return failure();
  return plan->arenaBytes;
}

std::string mebibytes(uint64_t bytes) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.2f MiB", bytes / 1048576.0);
  return text;
}

} // namespace

FailureOr<RematerializationPlan>
mlir::moe::rematerialize(func::FuncOp step, uint64_t arenaBudget) {
  RematerializationPlan result;
  result.arenaBudget = arenaBudget;
  Rematerializer remat(step);
  std::vector<Candidate> candidates = remat.candidates();
  // Full recomputation (checkpointing only the inputs) runs the whole
  // forward pass again.
  for (Operation *op : remat.forward)
    result.fullRecomputeFlops += modelFlops(op);
  FailureOr<uint64_t> before = arenaWith(step, candidates, 0);
  if (failed(before))
    return failure();
  result.arenaBefore = result.arenaAfter = *before;
  result.keptBytes = savedActivationBytes(step);
  if (*before <= arenaBudget)
    return result;

  FailureOr<uint64_t> least = arenaWith(step, candidates, candidates.size());
  if (failed(least))
    return failure();
  if (*least > arenaBudget)
    return step.emitOpError()
           << "does not fit the memory budget even when every activation is "
              "recomputed: its arena needs "
           << mebibytes(*least) << " (" << mebibytes(*before)
           << " without recomputation), the budget leaves "
           << mebibytes(arenaBudget) << " after parameters, optimizer state, "
              "inputs and kernel workspace";
  // The shortest prefix that fits; more recomputation frees at least as
  // much in practice, and the final plan is checked again.
  size_t low = 0, high = candidates.size();
  while (low + 1 < high) {
    size_t middle = (low + high) / 2;
    FailureOr<uint64_t> arena = arenaWith(step, candidates, middle);
    if (failed(arena))
      return failure();
    (*arena <= arenaBudget ? high : low) = middle;
  }
  SmallVector<Operation *> chosen;
  for (size_t i = 0; i < high; ++i) {
    chosen.push_back(candidates[i].op);
    result.recomputeFlops += candidates[i].flops;
    result.recomputedBytes += candidates[i].savedBytes;
  }
  Rematerializer::apply(chosen);
  result.recomputedOps = chosen.size();
  FailureOr<MemoryPlan> plan = planMemory(step);
  if (failed(plan))
    return failure();
  result.arenaAfter = plan->arenaBytes;
  result.keptBytes = savedActivationBytes(step);
  if (result.arenaAfter > arenaBudget)
    return step.emitOpError()
           << "recomputing " << chosen.size() << " ops leaves an arena of "
           << mebibytes(result.arenaAfter) << ", over the budget's "
           << mebibytes(arenaBudget);
  return result;
}

/// The arena a step may plan when a rank may hold `budget` bytes: what is
/// left after its parameters, optimizer state, inputs and the kernels'
/// workspace. A pipelined step holds its stages' parameters and one arena
/// and set of inputs per microbatch in flight, on each rank; the tightest
/// rank sets the arena. Fails, on the step, when those alone do not fit.
static FailureOr<uint64_t> arenaBudgetOf(ModuleOp module, func::FuncOp step,
                                         uint64_t budget) {
  // Sums saturate instead of wrapping: an overflowing total must not
  // look like one that fits.
  uint64_t inputs = 0;
  for (Type type : step.getArgumentTypes())
    inputs = llvm::SaturatingAdd(inputs, tensorBytes(type));
  SmallVector<PipelineRankMemory> ranks = pipelineRankMemory(module, step);
  if (ranks.empty()) {
    PipelineRankMemory whole;
    whole.workspaceBytes = kernelWorkspaceBytes(module, step);
    for (ParamOp param : module.getOps<ParamOp>())
      whole.paramBytes = llvm::SaturatingAdd(
          whole.paramBytes, tensorBytes(param.getTensorType()));
    ranks.push_back(whole);
  }
  std::optional<uint64_t> arena;
  for (auto [rank, memory] : llvm::enumerate(ranks)) {
    uint64_t fixed = llvm::SaturatingAdd(
        memory.workspaceBytes, memory.persistentBytes(),
        llvm::SaturatingMultiply<uint64_t>(memory.slots, inputs));
    if (budget < fixed) {
      InFlightDiagnostic diag = step.emitOpError();
      diag << "does not fit the memory budget of " << mebibytes(budget)
           << ": parameters, optimizer state, inputs and kernel workspace "
              "alone need "
           << mebibytes(fixed);
      if (ranks.size() > 1)
        diag << " on pipeline rank " << rank << " (" << memory.slots
             << " microbatches in flight)";
      return failure();
    }
    uint64_t perSlot = (budget - fixed) / memory.slots;
    arena = arena ? std::min(*arena, perSlot) : perSlot;
  }
  return *arena;
}

namespace {
struct RematerializePass
    : public mlir::moe::impl::RematerializeBase<RematerializePass> {
  using RematerializeBase::RematerializeBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to rematerialize");
    if (failed(step))
      return signalPassFailure();
    FailureOr<uint64_t> arenaBudget = arenaBudgetOf(module, *step, budget);
    if (failed(arenaBudget))
      return signalPassFailure();
    FailureOr<RematerializationPlan> plan =
        rematerialize(*step, *arenaBudget);
    if (failed(plan))
      return signalPassFailure();
    Builder builder(module.getContext());
    (*step)->setAttr(kRecomputeFlopsAttrName,
                     builder.getF64FloatAttr(plan->recomputeFlops));
    (*step)->setAttr(kFullRecomputeFlopsAttrName,
                     builder.getF64FloatAttr(plan->fullRecomputeFlops));
    (*step)->setAttr(kMemoryBudgetAttrName,
                     builder.getI64IntegerAttr(budget));
  }
};
} // namespace
