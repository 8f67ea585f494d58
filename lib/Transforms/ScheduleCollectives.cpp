//===- ScheduleCollectives.cpp - start collectives as early as they can ---===//
//
// A collective runs on the backend's communication stream (CUDA) or thread
// (CPU, --async-collectives) from its position in the program until its
// first reader, while the compute goes on. Its position therefore decides
// what it can overlap. moe-partition puts collectives where it meets them,
// which for two kinds is late:
//
// - Gradient reductions of sharded weights (FSDP's reduce-scatters) sit at
//   the optimizer, after the whole backward pass: nothing is left to hide
//   them behind, and every full-size gradient stays alive until then. Each
//   reduction moves to right after the op that makes its operand, so it
//   runs under the rest of the backward and the full gradient dies there.
// - Parameter all-gathers sit right before their first reader. The gathers
//   of a pipeline unit (the embedding, a layer, the head: the parameters'
//   names say which, pipelineUnitOfName) move to where the previous unit's
//   gathered weights are first read: one layer ahead, so the gather runs
//   while that layer computes. The weights then live one layer longer. A
//   module without its moe.transformer's layer count keeps its gathers.
//
// Moving a collective changes neither its operands nor its group, and every
// rank runs the same program, so the ranks still call each group in one
// order and the values are those of the unscheduled step, bit for bit.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Transforms.h"

namespace mlir::moe {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVES
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

/// The parameter an all-gather gathers, if it gathers one.
static GetParamOp gatheredParameter(AllGatherOp gather) {
  return gather.getInput().getDefiningOp<GetParamOp>();
}

/// The first op that reads one of `values` (all in one block), if any.
static Operation *firstReaderOf(ArrayRef<Value> values) {
  Operation *first = nullptr;
  for (Value value : values)
    for (Operation *user : value.getUsers())
      if (!first || user->isBeforeInBlock(first))
        first = user;
  return first;
}

unsigned mlir::moe::scheduleCollectives(func::FuncOp step) {
  Block &body = step.getBody().front();
  unsigned moved = 0;

  // Reductions, right after what they reduce.
  SmallVector<Operation *> reductions;
  for (Operation &op : body)
    if (isa<ReduceScatterOp, AllReduceOp>(op))
      reductions.push_back(&op);
  for (Operation *reduction : reductions) {
    Operation *producer = reduction->getOperand(0).getDefiningOp();
    if (!producer || producer->getBlock() != &body)
      continue;
    // After the reductions already there of the same producer's results,
    // which keep their order.
    Operation *after = producer;
    while (Operation *next = after->getNextNode()) {
      if (next == reduction || !isa<ReduceScatterOp, AllReduceOp>(next) ||
          next->getOperand(0).getDefiningOp() != producer)
        break;
      after = next;
    }
    if (after->getNextNode() == reduction)
      continue;
    reduction->moveAfter(after);
    ++moved;
  }

  // Parameter gathers in runs of one unit each, in program order.
  auto model = step->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
      kModelAttrName);
  auto layers = model ? model.getAs<IntegerAttr>("layers") : IntegerAttr();
  if (!layers)
    return moved;
  struct Run {
    std::optional<unsigned> unit;
    SmallVector<AllGatherOp> gathers;
  };
  SmallVector<Run> runs;
  for (auto gather : body.getOps<AllGatherOp>()) {
    GetParamOp param = gatheredParameter(gather);
    if (!param)
      continue;
    std::optional<unsigned> unit =
        pipelineUnitOfName(param.getParam(), layers.getInt());
    if (runs.empty() || runs.back().unit != unit)
      runs.push_back({unit, {}});
    runs.back().gathers.push_back(gather);
  }
  // Where each run starts: where the previous run's weights are first read
  // (found before anything moves).
  SmallVector<Operation *> starts(runs.size(), nullptr);
  for (size_t i = 1; i < runs.size(); ++i) {
    SmallVector<Value> previous;
    for (AllGatherOp gather : runs[i - 1].gathers)
      previous.push_back(gather.getResult());
    starts[i] = firstReaderOf(previous);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    Operation *start = starts[i];
    if (!start)
      continue;
    for (AllGatherOp gather : runs[i].gathers) {
      if (gather->isBeforeInBlock(start))
        continue;
      // The read of the parameter comes along unless it is earlier already.
      GetParamOp param = gatheredParameter(gather);
      if (!param->isBeforeInBlock(start))
        param->moveBefore(start);
      gather->moveBefore(start);
      ++moved;
    }
  }
  return moved;
}

namespace {
struct ScheduleCollectivesPass
    : public mlir::moe::impl::ScheduleCollectivesBase<ScheduleCollectivesPass> {
  using ScheduleCollectivesBase::ScheduleCollectivesBase;
  void runOnOperation() override {
    FailureOr<func::FuncOp> step = lookupFunction(
        getOperation(), function, "to schedule the collectives of");
    if (failed(step))
      return signalPassFailure();
    scheduleCollectives(*step);
  }
};
} // namespace
