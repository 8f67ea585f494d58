//===- RingAttention.cpp - context parallelism's ring of key blocks -------===//
//
// moe-partition lowers context parallelism's attention to an all-gather of
// the keys and values over the sequence's axes before it, and a
// reduce-scatter of their gradients after its backward: the keys cross the
// network in one exposed collective. Ring attention sends the same bytes in
// n - 1 steps, each behind the attention of the block before. This pass
// rewrites the gathered form into the ring where asked: the attention (and
// its gradient) reads its rank's key/value blocks and carries `ring`, and
// the collectives that only served it go.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_RINGATTENTION
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The block that `whole` gathers along the sequence over `axes`, if it is
/// such an all-gather.
Value gatheredBlock(Value whole, ArrayAttr axes) {
  auto gather = whole.getDefiningOp<AllGatherOp>();
  if (!gather || gather.getDim() != 1 || gather.getAxes() != axes)
    return {};
  return gather.getInput();
}

/// The reduce-scatter of `gradient` along the sequence over `axes` when it
/// is its only reader.
ReduceScatterOp onlyScatter(Value gradient, ArrayAttr axes) {
  if (!gradient.hasOneUse())
    return {};
  auto scatter = dyn_cast<ReduceScatterOp>(*gradient.getUsers().begin());
  if (!scatter || scatter.getDim() != 1 || scatter.getAxes() != axes)
    return {};
  return scatter;
}

/// Whether `comm` takes the ring for an attention over `ranks` ranks.
bool takesRing(StringRef comm, int64_t ranks, int64_t heads, int64_t kvHeads) {
  if (comm == "ring")
    return true;
  if (comm == "allgather")
    return false;
  return ranks > 2 || kvHeads == heads;
}

int64_t ranksOf(MeshOp mesh, ArrayAttr axes) {
  int64_t ranks = 1;
  for (StringRef axis : axes.getAsValueRange<StringAttr>())
    ranks *= mesh.getAxisSize(axis).value_or(1);
  return ranks;
}

} // namespace

LogicalResult mlir::moe::passKeysAroundRing(func::FuncOp step, MeshOp mesh,
                                            StringRef comm) {
  // Shared by an attention and its gradient (the partitioner's reshards
  // are cached): each once.
  llvm::SetVector<Operation *> gathers;
  // Collected first: rewriting a gradient erases ops the walk would visit.
  SmallVector<Operation *> attentions;
  step.walk([&](Operation *op) {
    if (isa<AttentionOp, AttentionGradOp>(op))
      attentions.push_back(op);
  });
  for (Operation *op : attentions) {
    auto each = [&]() -> WalkResult {
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        std::optional<ArrayAttr> axes = attention.getSequenceAxes();
        if (!axes || attention.getRing() ||
            !takesRing(comm, ranksOf(mesh, *axes), attention.getNumHeads(),
                       attention.getNumKvHeads()))
          return WalkResult::advance();
        Value key = gatheredBlock(attention.getKey(), *axes);
        Value value = gatheredBlock(attention.getValue(), *axes);
        if (!key || !value)
          return WalkResult::advance();
        gathers.insert(attention.getKey().getDefiningOp());
        gathers.insert(attention.getValue().getDefiningOp());
        attention.getKeyMutable().assign(key);
        attention.getValueMutable().assign(value);
        attention.setRing(true);
        return WalkResult::advance();
      }
      auto grad = dyn_cast<AttentionGradOp>(op);
      if (!grad)
        return WalkResult::advance();
      std::optional<ArrayAttr> axes = grad.getSequenceAxes();
      if (!axes || grad.getRing() ||
          !takesRing(comm, ranksOf(mesh, *axes), grad.getNumHeads(),
                     grad.getNumKvHeads()))
        return WalkResult::advance();
      Value key = gatheredBlock(grad.getKey(), *axes);
      Value value = gatheredBlock(grad.getValue(), *axes);
      ReduceScatterOp keyScatter = onlyScatter(grad.getKeyGrad(), *axes);
      ReduceScatterOp valueScatter = onlyScatter(grad.getValueGrad(), *axes);
      if (!key || !value || !keyScatter || !valueScatter)
        return WalkResult::advance();
      gathers.insert(grad.getKey().getDefiningOp());
      gathers.insert(grad.getValue().getDefiningOp());
      OpBuilder builder(grad);
      auto ring = builder.create<AttentionGradOp>(
          grad.getLoc(), grad.getQueryGrad().getType(), key.getType(),
          value.getType(), grad.getGrad(), grad.getQuery(), key, value,
          grad.getOutput(), grad.getLse(), grad.getPositions(),
          grad.getNumHeadsAttr(), grad.getNumKvHeadsAttr(), *axes,
          builder.getUnitAttr(), grad.getScaleFactorAttr());
      // Per-rank attributes the partitioner or later passes left on it
      // (pipeline tags) go with it.
      for (NamedAttribute attr : grad->getDiscardableAttrs())
        ring->setAttr(attr.getName(), attr.getValue());
      grad.getQueryGrad().replaceAllUsesWith(ring.getQueryGrad());
      keyScatter.getResult().replaceAllUsesWith(ring.getKeyGrad());
      valueScatter.getResult().replaceAllUsesWith(ring.getValueGrad());
      keyScatter.erase();
      valueScatter.erase();
      grad.erase();
      return WalkResult::advance();
    };
    if (each().wasInterrupted())
      return failure();
  }
  // The gathers that served only the rewritten attentions.
  for (Operation *gather : gathers)
    if (gather->use_empty())
      gather->erase();
  return success();
}

namespace {
struct RingAttentionPass
    : public mlir::moe::impl::RingAttentionBase<RingAttentionPass> {
  using RingAttentionBase::RingAttentionBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (comm != "auto" && comm != "ring" && comm != "allgather") {
      module.emitError() << "unknown cp-comm '" << comm
                         << "': expected auto, ring or allgather";
      return signalPassFailure();
    }
    MeshOp mesh = getMesh(module);
    if (!mesh)
      return;
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to pass keys around a ring in");
    if (failed(step) || failed(passKeysAroundRing(*step, mesh, comm)))
      return signalPassFailure();
  }
};
} // namespace
