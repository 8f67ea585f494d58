//===- PlanMemory.cpp - arena layout of a step's temporaries by liveness --===//
//
// Greedy-by-size offset assignment (as TFLite's arena planner): the largest
// tensors are placed first, each at the lowest 64-byte aligned offset that
// does not overlap a placed tensor whose live range intersects its own. An
// op's results and operands are live at the op, so a kernel never writes
// over its own inputs.
//
// A step split into pipeline stages (moe-split-pipeline-stages) runs each op
// on one pipeline rank, each rank in its own arena of the planned size; two
// values may then share bytes when no rank holds both at once, so each
// rank's arena holds about its own stages' peak instead of the model's.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"
#include "moe/Runtime/Program.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"

#include <map>

namespace mlir::moe {
#define GEN_PASS_DEF_PLANMEMORY
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

// The runtime verifies every arena offset against the same alignment.
static constexpr uint64_t kAlignment = ::moe::rt::kArenaAlignment;

uint64_t mlir::moe::tensorBytes(Type type) {
  auto shaped = cast<ShapedType>(type);
  return static_cast<uint64_t>(shaped.getNumElements()) * 4;
}

namespace {
struct Interval {
  Value value;
  size_t begin, end; // op indices, inclusive
  uint64_t bytes;
  llvm::SmallBitVector ranks; // the pipeline ranks holding it
};

/// The pipeline ranks that run `op`: its stage's (stage % ranks), or all
/// for the optimizer ops tagged -1 and for an untagged step.
llvm::SmallBitVector ranksRunning(Operation *op, unsigned ranks) {
  llvm::SmallBitVector bits(ranks);
  auto stage = op->getAttrOfType<IntegerAttr>(kPipelineStageAttrName);
  if (!stage || stage.getInt() < 0)
    bits.set();
  else
    bits.set(stage.getInt() % ranks);
  return bits;
}

/// The ranks that write or read `value`. The global norm reads only the
/// gradients of its own rank's stages (the runtime adds the others' squares
/// over the stages), which are written there too.
llvm::SmallBitVector ranksHolding(Value value, unsigned ranks) {
  llvm::SmallBitVector bits = ranksRunning(value.getDefiningOp(), ranks);
  for (Operation *user : value.getUsers())
    if (!isa<func::ReturnOp, GlobalNormOp>(user))
      bits |= ranksRunning(user, ranks);
  return bits;
}
} // namespace

static uint64_t alignUp(uint64_t x) {
  return (x + kAlignment - 1) / kAlignment * kAlignment;
}

FailureOr<MemoryPlan> mlir::moe::planMemory(func::FuncOp function) {
  if (!function.getBody().hasOneBlock())
    return function.emitOpError() << "expected a single-block function";
  Block &block = function.getBody().front();

  // Live ranges in op order; values returned live to the end.
  llvm::DenseMap<Operation *, size_t> index;
  for (auto [i, op] : llvm::enumerate(block))
    index[&op] = i;
  size_t end = block.getOperations().size();
  auto ranksAttr = function->getAttrOfType<IntegerAttr>(kPipelineRanksAttrName);
  unsigned ranks = ranksAttr ? ranksAttr.getInt() : 1;
  SmallVector<Interval> intervals;
  for (Operation &op : block) {
    if (isa<GetParamOp>(op))
      continue;
    for (Value result : op.getResults()) {
      size_t last = index[&op];
      for (Operation *user : result.getUsers())
        last = std::max(last, isa<func::ReturnOp>(user) ? end : index[user]);
      intervals.push_back({result, index[&op], last,
                           tensorBytes(result.getType()),
                           ranksHolding(result, ranks)});
    }
  }

  // Place the largest first; ties in program order keep the plan stable.
  SmallVector<size_t> order(intervals.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    return intervals[a].bytes > intervals[b].bytes;
  });
  MemoryPlan plan;
  SmallVector<std::pair<size_t, uint64_t>> placed; // interval, offset
  for (size_t i : order) {
    const Interval &cur = intervals[i];
    // Occupied byte ranges of placed tensors alive at the same time, sorted.
    SmallVector<std::pair<uint64_t, uint64_t>> busy;
    for (auto [j, offset] : placed) {
      const Interval &other = intervals[j];
      if (other.begin <= cur.end && cur.begin <= other.end &&
          other.ranks.anyCommon(cur.ranks))
        busy.emplace_back(offset, offset + other.bytes);
    }
    llvm::sort(busy);
    uint64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + cur.bytes <= lo)
        break;
      offset = std::max(offset, alignUp(hi));
    }
    placed.emplace_back(i, offset);
    plan.offsets[cur.value] = offset;
    plan.arenaBytes = std::max(plan.arenaBytes, alignUp(offset + cur.bytes));
  }

  // Peak of the live total of the busiest rank: +bytes at begin, -bytes
  // after end.
  for (unsigned rank = 0; rank < ranks; ++rank) {
    std::map<size_t, int64_t> delta;
    for (const Interval &interval : intervals) {
      if (!interval.ranks.test(rank))
        continue;
      delta[interval.begin] += interval.bytes;
      delta[interval.end + 1] -= interval.bytes;
    }
    int64_t live = 0;
    for (auto [position, change] : delta) {
      live += change;
      plan.peakLiveBytes = std::max<uint64_t>(plan.peakLiveBytes, live);
    }
  }
  return plan;
}

void mlir::moe::annotateMemoryPlan(func::FuncOp function,
                                   const MemoryPlan &plan) {
  Builder builder(function.getContext());
  for (Operation &op : function.getBody().front()) {
    if (op.getNumResults() == 0 || isa<GetParamOp>(op))
      continue;
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults())
      offsets.push_back(plan.offsets.lookup(result));
    op.setAttr(kOffsetsAttrName, builder.getDenseI64ArrayAttr(offsets));
  }
  function->setAttr(kArenaBytesAttrName,
                    builder.getI64IntegerAttr(plan.arenaBytes));
  function->setAttr(kPeakLiveBytesAttrName,
                    builder.getI64IntegerAttr(plan.peakLiveBytes));
}

namespace {
struct PlanMemoryPass : public mlir::moe::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> step = lookupFunction(module, function, "to plan");
    if (failed(step))
      return signalPassFailure();
    FailureOr<MemoryPlan> plan = planMemory(*step);
    if (failed(plan))
      return signalPassFailure();
    annotateMemoryPlan(*step, *plan);
  }
};
} // namespace
