//===- PlanMemory.cpp - arena layout of a step's temporaries by liveness --===//
//
// Sweeps over the live ranges in program order: where a sweep enters a
// value, the value takes the smallest free range that holds it (best fit,
// 64-byte aligned, the lowest such range among equals; the arena grows when
// none does); after the position where it leaves the value, it releases it,
// coalescing with free neighbours. An op's results and operands are live at
// the op, so a kernel never writes over its own inputs. With a free list
// indexed by offset and by size (ArenaFreeList.h) each step is O(log n), a
// sweep O(n log n) in the step's temporaries. (Greedy-by-size placement
// against every time-overlapping placed tensor, as before, was O(n^2) here:
// in a training step most saved activations and gradients overlap in time.)
//
// A sweep that only looks ahead cannot know that a long-lived value is best
// placed where values about to die are: a forward sweep strands the
// backward pass's gradients above the saved activations. So sweeps start
// from a pivot: the values live at the peak are stacked first, and two
// sweeps run from there, forwards to the end and backwards to the start.
// Pivots at the peaks of the busiest ranks and at the first and last op,
// with two stackings each, give a few candidate plans; the smallest arena
// wins. For the bundled models it is at the peak of live bytes or within 2%
// (bench/arena-sizes.sh).
//
// A step split into pipeline stages (moe-split-pipeline-stages) runs each op
// on one pipeline rank, each rank in its own arena of the planned size; two
// values may then share bytes when no rank holds both at once. Each rank has
// its own free list; a value several ranks hold (sent between stages, or an
// optimizer scalar every rank computes) takes the lowest offset free on all
// of them, so each rank's arena holds about its own stages' peak instead of
// the model's.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/ArenaFreeList.h"
#include "moe/Transforms/ElementTypes.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"
#include "moe/Runtime/Program.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <numeric>

namespace mlir::moe {
#define GEN_PASS_DEF_PLANMEMORY
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

// The runtime verifies every arena offset against the same alignment.
static constexpr uint64_t kAlignment = ::moe::rt::kArenaAlignment;

// The largest arena planned: 64 PiB, far beyond any machine, and small
// enough that sums of arenas, slots and parameters stay inside int64.
static constexpr uint64_t kMaxArenaBytes = uint64_t(1) << 56;

namespace {
/// The live range of one arena value and the pipeline ranks holding it.
struct Interval {
  Value value;
  size_t begin, end;       // op indices, inclusive
  uint64_t bytes, aligned; // its size, and what it takes in the arena
  /// The pipeline ranks holding it, ascending; empty when all do.
  SmallVector<unsigned, 2> ranks;
};

/// The pipeline rank that runs `op` (pipelineRankRunning), or none (all
/// ranks) on a single rank.
std::optional<unsigned> rankRunning(Operation *op, unsigned ranks) {
  if (ranks == 1)
    return std::nullopt;
  if (std::optional<int64_t> rank = pipelineRankRunning(op, ranks))
    return static_cast<unsigned>(*rank);
  return std::nullopt;
}

/// The ranks that write or read `value` (empty: all). The global norm reads
/// only the gradients of its own rank's stages (the runtime adds the
/// others' squares over the stages), which are written there too; a
/// pipeline gradient sum receives the other rank's half into memory of its
/// own.
SmallVector<unsigned, 2> ranksHolding(Value value, unsigned ranks) {
  SmallVector<unsigned, 2> holding;
  auto add = [&](Operation *op) {
    std::optional<unsigned> rank = rankRunning(op, ranks);
    if (!rank)
      return false;
    holding.push_back(*rank);
    return true;
  };
  Operation *def = value.getDefiningOp();
  if (!add(def))
    return {};
  for (Operation *user : value.getUsers()) {
    if (isa<func::ReturnOp, GlobalNormOp>(user) ||
        (isa<PipelineGradientSumOp>(user) &&
         rankRunning(user, ranks) != rankRunning(def, ranks)))
      continue;
    if (!add(user))
      return {};
  }
  llvm::sort(holding);
  holding.erase(std::unique(holding.begin(), holding.end()), holding.end());
  return holding;
}

uint64_t alignUp(uint64_t x) {
  return (x + kAlignment - 1) / kAlignment * kAlignment;
}

/// The arenas of the pipeline ranks (one when not split), swept together.
class ArenaSweep {
public:
  explicit ArenaSweep(unsigned ranks) : ranks(ranks) {
    for (unsigned rank = 0; rank < ranks; ++rank)
      all.push_back(rank);
    freeLists.resize(ranks);
  }

  /// The offset `interval` takes on every rank holding it.
  uint64_t allocate(const Interval &interval) {
    ArrayRef<unsigned> holding = holders(interval);
    uint64_t bytes = interval.aligned, offset;
    if (holding.size() == 1) {
      offset = freeLists[holding.front()].bestFit(bytes);
    } else {
      // The lowest offset free on every holder: raise a candidate until
      // no holder moves it.
      offset = 0;
      for (bool moved = true; moved;) {
        moved = false;
        for (unsigned rank : holding) {
          uint64_t fit = freeLists[rank].firstFitFrom(offset, bytes);
          moved |= fit != offset;
          offset = fit;
        }
      }
    }
    for (unsigned rank : holding)
      freeLists[rank].take(offset, bytes);
    return offset;
  }

  void release(const Interval &interval, uint64_t offset) {
    for (unsigned rank : holders(interval))
      freeLists[rank].release(offset, interval.aligned);
  }

  uint64_t visits() const {
    uint64_t total = 0;
    for (const ArenaFreeList &list : freeLists)
      total += list.visits();
    return total;
  }

private:
  ArrayRef<unsigned> holders(const Interval &interval) const {
    return interval.ranks.empty() ? ArrayRef<unsigned>(all)
                                  : ArrayRef<unsigned>(interval.ranks);
  }

  unsigned ranks;
  SmallVector<unsigned> all;
  std::vector<ArenaFreeList> freeLists;
};
} // namespace

namespace {
struct SweepResult {
  std::vector<uint64_t> offsets; // per interval
  uint64_t arenaBytes = 0;
  uint64_t work = 0;
  /// An interval that took the arena past kMaxArenaBytes.
  std::optional<size_t> overflow;
};

/// How the values live at a sweep's pivot are stacked before the sweep.
enum class PivotOrder {
  /// The last to die at the bottom: a value and its neighbours in the
  /// arena tend to die, and be born, together (saved activations die in
  /// the reverse of their birth order), so the holes they leave coalesce.
  LastDeathFirst,
  /// In program order.
  FirstBirthFirst,
};
} // namespace

/// Places `intervals` (in program order, so by begin; `byEnd` indexes them
/// by end, stably) around the position `pivot`: first the values live
/// there, which all hold their bytes at once, stacked in `order`; then one
/// sweep from the pivot to the end and one from the pivot back to the
/// start, each from that layout. Going forward a value takes its bytes at
/// its first position and releases them after its last; going back, the
/// mirror image. No value of one half is live with one of the other, so
/// they share only the pivot's values.
static SweepResult sweepFrom(ArrayRef<Interval> intervals,
                             ArrayRef<size_t> byEnd, unsigned ranks,
                             size_t pivot, PivotOrder order) {
  SweepResult result;
  result.offsets.resize(intervals.size());
  auto place = [&](ArenaSweep &arenas, size_t i) {
    // Past the largest arena the plan is refused: stop before any offset
    // could wrap.
    if (result.overflow)
      return;
    uint64_t offset = arenas.allocate(intervals[i]);
    result.offsets[i] = offset;
    uint64_t top = offset + intervals[i].aligned;
    if (top > kMaxArenaBytes)
      result.overflow = i;
    result.arenaBytes = std::max(result.arenaBytes, top);
  };
  auto release = [&](ArenaSweep &arenas, size_t i) {
    if (!result.overflow)
      arenas.release(intervals[i], result.offsets[i]);
  };
  auto beginOf = [&](size_t i) { return intervals[i].begin; };
  auto endOf = [&](size_t i) { return intervals[i].end; };

  SmallVector<size_t> atPivot;
  for (auto [i, interval] : llvm::enumerate(intervals))
    if (interval.begin <= pivot && pivot <= interval.end)
      atPivot.push_back(i);
  llvm::stable_sort(atPivot, [&](size_t a, size_t b) {
    return order == PivotOrder::LastDeathFirst ? endOf(a) > endOf(b)
                                               : beginOf(a) < beginOf(b);
  });
  ArenaSweep forward(ranks);
  for (size_t i : atPivot)
    place(forward, i);
  ArenaSweep backward = forward;

  // Forward: values beginning after the pivot are taken where they begin;
  // every value ending at or after it is released after its end.
  auto bornByPivot = [&](const Interval &v) { return v.begin <= pivot; };
  auto deadBeforePivot = [&](size_t i) { return endOf(i) < pivot; };
  size_t afterPivot =
      llvm::partition_point(intervals, bornByPivot) - intervals.begin();
  size_t endingBefore =
      llvm::partition_point(byEnd, deadBeforePivot) - byEnd.begin();
  for (size_t take = afterPivot, leave = endingBefore; leave < byEnd.size();) {
    size_t position = endOf(byEnd[leave]);
    if (take < intervals.size())
      position = std::min(position, beginOf(take));
    for (; take < intervals.size() && beginOf(take) == position; ++take)
      place(forward, take);
    for (; leave < byEnd.size() && endOf(byEnd[leave]) == position; ++leave)
      release(forward, byEnd[leave]);
  }
  // Backward, the mirror image: values ending before the pivot are taken
  // where they end, latest first; every value beginning at or before it is
  // released where it begins.
  for (size_t take = endingBefore, leave = afterPivot; leave > 0;) {
    size_t position = beginOf(leave - 1);
    if (take > 0)
      position = std::max(position, endOf(byEnd[take - 1]));
    // Those ending here in program order, as going forward.
    size_t first = take;
    while (first > 0 && endOf(byEnd[first - 1]) == position)
      --first;
    for (size_t i = first; i < take; ++i)
      place(backward, byEnd[i]);
    take = first;
    for (; leave > 0 && beginOf(leave - 1) == position; --leave)
      release(backward, leave - 1);
  }
  result.work = forward.visits() + backward.visits();
  return result;
}

static LogicalResult arenaOverflow(func::FuncOp function, Value value) {
  return value.getDefiningOp()->emitOpError()
         << "result " << cast<OpResult>(value).getResultNumber() << " ("
         << value.getType() << ") takes the arena of '"
         << function.getSymName() << "' past 2^56 bytes (64 PiB)";
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
  std::vector<Interval> intervals;
  for (Operation &op : block) {
    if (isa<GetParamOp>(op))
      continue;
    for (Value result : op.getResults()) {
      // Each value takes its dtype's bytes per element; a value no artifact
      // buffer can hold is refused here, before it is given any.
      if (failed(artifactDTypeOf(result)))
        return failure();
      size_t last = index[&op];
      for (Operation *user : result.getUsers())
        last = std::max(last, isa<func::ReturnOp>(user) ? end : index[user]);
      uint64_t bytes = tensorBytes(result.getType());
      intervals.push_back({result, index[&op], last, bytes, alignUp(bytes),
                           ranksHolding(result, ranks)});
    }
  }

  // The busiest rank's peak of live bytes (+bytes at begin, -bytes after
  // end) and where it is. No arena holds less, so a live total past the
  // largest arena is an error before any sum could overflow.
  std::vector<std::vector<std::pair<size_t, int64_t>>> changes(ranks);
  for (auto [i, interval] : llvm::enumerate(intervals)) {
    auto record = [&](unsigned rank) {
      // +(i + 1) for a birth, -(i + 1) for a death: deaths sort first.
      changes[rank].emplace_back(interval.begin, i + 1);
      changes[rank].emplace_back(interval.end + 1,
                                 -static_cast<int64_t>(i + 1));
    };
    if (interval.ranks.empty())
      for (unsigned rank = 0; rank < ranks; ++rank)
        record(rank);
    else
      llvm::for_each(interval.ranks, record);
  }
  MemoryPlan plan;
  // Per rank: its peak and where it is.
  std::vector<std::pair<uint64_t, size_t>> rankPeaks;
  for (auto &rankChanges : changes) {
    llvm::sort(rankChanges);
    uint64_t live = 0;
    std::pair<uint64_t, size_t> peak = {0, 0};
    for (auto [position, change] : rankChanges) {
      const Interval &interval = intervals[std::abs(change) - 1];
      if (change < 0) {
        live -= interval.bytes;
        continue;
      }
      live += interval.bytes;
      if (live > kMaxArenaBytes)
        return arenaOverflow(function, interval.value);
      if (live > peak.first)
        peak = {live, position};
    }
    rankPeaks.push_back(peak);
    plan.peakLiveBytes = std::max(plan.peakLiveBytes, peak.first);
  }

  // Sweeps out of the peaks of the (at most 4) busiest ranks, each with
  // both stackings of the values live there, and plain sweeps forwards and
  // backwards (the backward pass then packs first). Each is O(n log n), so
  // all together are; the smallest arena wins, the first among equals.
  llvm::stable_sort(rankPeaks,
                    [](auto a, auto b) { return a.first > b.first; });
  SmallVector<size_t, 4> pivots;
  for (auto [bytes, position] : rankPeaks)
    if (pivots.size() < 4 && !llvm::is_contained(pivots, position))
      pivots.push_back(position);
  std::vector<size_t> byEnd(intervals.size());
  std::iota(byEnd.begin(), byEnd.end(), 0);
  llvm::stable_sort(byEnd, [&](size_t a, size_t b) {
    return intervals[a].end < intervals[b].end;
  });
  std::vector<SweepResult> candidates;
  candidates.push_back(
      sweepFrom(intervals, byEnd, ranks, 0, PivotOrder::FirstBirthFirst));
  for (size_t pivot : pivots)
    for (PivotOrder order :
         {PivotOrder::LastDeathFirst, PivotOrder::FirstBirthFirst})
      candidates.push_back(sweepFrom(intervals, byEnd, ranks, pivot, order));
  candidates.push_back(
      sweepFrom(intervals, byEnd, ranks, end, PivotOrder::LastDeathFirst));
  const SweepResult *best = &candidates[0];
  for (const SweepResult &candidate : candidates) {
    plan.work += candidate.work;
    if (candidate.arenaBytes < best->arenaBytes)
      best = &candidate;
  }
  if (best->overflow)
    return arenaOverflow(function, intervals[*best->overflow].value);
  for (auto [interval, offset] : llvm::zip(intervals, best->offsets))
    plan.offsets[interval.value] = offset;
  plan.arenaBytes = best->arenaBytes;
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
