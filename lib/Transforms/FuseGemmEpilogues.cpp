//===- FuseGemmEpilogues.cpp - residual adds into the GEMMs that feed them
//-===//
//
// A residual add (h + o_proj(attn)), or the sum of a value's gradient
// contributions (dx from q, k and v; the residual stream's), is one more
// pass over an activation after the GEMM that made one of its terms: the
// GEMM writes its product, the add reads it back with the other term and
// writes the sum. BLAS adds the product to what C holds (beta = 1) in the
// same epilogue that stores it, so the GEMM can start from the other term
// instead. The pass runs on the per-rank step, after moe-partition: a
// product that is a partial sum (a row-parallel projection under tensor
// parallelism) reaches its add through a collective and is left alone, and
// every mesh without one fuses the same adds. It runs after the
// recomputation moe-rematerialize chose, whose candidates an addend read
// by a GEMM would change, right before the memory plan. Under BF16 storage the
// adds stay: the recipe rounds the product to BF16 before adding it.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Target.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_FUSEGEMMEPILOGUES
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

/// The GEMM that makes `value`, when its product could start from an
/// addend instead: a linear or an input gradient without one, read only
/// here, in `block`.
static Operation *fusableProduct(Value value, Block *block) {
  Operation *def = value.getDefiningOp();
  if (!def || def->getBlock() != block || !def->hasOneUse())
    return nullptr;
  if (auto linear = dyn_cast<LinearOp>(def))
    return linear.getAddend() ? nullptr : def;
  if (auto grad = dyn_cast<LinearGradInputOp>(def))
    return grad.getAddend() ? nullptr : def;
  return nullptr;
}

unsigned mlir::moe::fuseGemmEpilogues(func::FuncOp step) {
  SmallVector<AddOp> adds;
  step.walk([&](AddOp add) { adds.push_back(add); });
  unsigned fused = 0;
  for (AddOp add : adds) {
    Block *block = add->getBlock();
    Operation *lhs = fusableProduct(add.getLhs(), block);
    Operation *rhs = fusableProduct(add.getRhs(), block);
    // BF16 storage rounds the product before the add (docs/precision.md);
    // an epilogue would round once, after it.
    if ((!lhs && !rhs) || add.getLhs() == add.getRhs() ||
        !add.getType().getElementType().isF32())
      continue;
    // The later product, so that the earlier term is ready to start from.
    bool takeRhs = rhs && (!lhs || lhs->isBeforeInBlock(rhs));
    Operation *product = takeRhs ? rhs : lhs;
    Value addend = takeRhs ? add.getLhs() : add.getRhs();
    // The GEMM stays where it is, so no value lives longer than it did: the
    // addend must be ready there.
    if (Operation *def = addend.getDefiningOp();
        def && (def->getBlock() != block || !def->isBeforeInBlock(product)))
      continue;
    OpBuilder builder(product);
    Operation *replacement;
    if (auto linear = dyn_cast<LinearOp>(product))
      replacement = builder.create<LinearOp>(linear.getLoc(), add.getType(),
                                             linear.getInput(),
                                             linear.getWeight(), addend);
    else {
      auto grad = cast<LinearGradInputOp>(product);
      replacement = builder.create<LinearGradInputOp>(
          grad.getLoc(), add.getType(), grad.getGrad(), grad.getWeight(),
          addend);
    }
    // The GEMM's place in the pipeline (stage, phase) and whether it is a
    // recomputation stay its own.
    replacement->setDiscardableAttrs(product->getDiscardableAttrDictionary());
    add.getResult().replaceAllUsesWith(replacement->getResult(0));
    add.erase();
    product->erase();
    ++fused;
  }
  return fused;
}

namespace {
struct FuseGemmEpiloguesPass
    : public mlir::moe::impl::FuseGemmEpiloguesBase<FuseGemmEpiloguesPass> {
  using FuseGemmEpiloguesBase::FuseGemmEpiloguesBase;
  void runOnOperation() override {
    // A backend without the fused form runs the ops apart: null.
    FailureOr<func::FuncOp> step = lookupFusionFunction(
        getOperation(), function, target,
        [](const Target &t) { return t.capabilities.gemmEpilogues; },
        "to fuse GEMM epilogues in");
    if (failed(step))
      return signalPassFailure();
    if (*step)
      fuseGemmEpilogues(*step);
  }
};
} // namespace
