//===- FuseLinearCrossEntropy.cpp - the LM head fused with its loss -------===//
//
// The unfused LM head writes [tokens, vocab] logits, keeps them from the
// forward to the backward, and writes their gradient there: with a
// realistic vocabulary (32k to 150k) these are a step's largest
// activations, and each is a full pass over memory. The fused op computes
// the logits block of vocabulary by block and keeps one log-sum-exp per
// token; its gradient recomputes each block (one more GEMM of the head's
// size) and consumes it at once. It runs before moe-autodiff, so the VJP
// of the fused op derives the fused backward, and before sharding, so
// every mesh computes the same thing.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Target.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_FUSELINEARCROSSENTROPY
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

unsigned mlir::moe::fuseLinearCrossEntropy(func::FuncOp function) {
  SmallVector<CrossEntropyOp> losses;
  function.walk([&](CrossEntropyOp loss) { losses.push_back(loss); });
  unsigned fused = 0;
  for (CrossEntropyOp loss : losses) {
    auto head = loss.getLogits().getDefiningOp<LinearOp>();
    // Logits read by anything else must exist: nothing to fuse.
    if (!head || !head->hasOneUse() || head->getBlock() != loss->getBlock())
      continue;
    Type f32 = Float32Type::get(function.getContext());
    auto tokens = cast<RankedTensorType>(loss.getTargets().getType());
    OpBuilder builder(loss);
    auto fusedOp = builder.create<LinearCrossEntropyOp>(
        head.getLoc(), loss.getResult().getType(),
        RankedTensorType::get(tokens.getShape(), f32), head.getInput(),
        head.getWeight(), loss.getTargets(), loss.getTokenAxesAttr());
    loss.getResult().replaceAllUsesWith(fusedOp.getLoss());
    loss.erase();
    head.erase();
    ++fused;
  }
  return fused;
}

namespace {
struct FuseLinearCrossEntropyPass
    : public mlir::moe::impl::FuseLinearCrossEntropyBase<
          FuseLinearCrossEntropyPass> {
  using FuseLinearCrossEntropyBase::FuseLinearCrossEntropyBase;
  void runOnOperation() override {
    // A backend without the fused form runs the ops apart: null.
    FailureOr<func::FuncOp> forward = lookupFusionFunction(
        getOperation(), function, target,
        [](const Target &t) { return t.capabilities.linearCrossEntropy; },
        "to fuse the LM head in");
    if (failed(forward))
      return signalPassFailure();
    if (*forward)
      fuseLinearCrossEntropy(*forward);
  }
};
} // namespace
