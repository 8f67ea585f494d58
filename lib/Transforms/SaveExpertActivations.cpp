//===- SaveExpertActivations.cpp - keep the experts' up projections -------===//
//
// moe.experts_grad needs each assignment's w1 x and w3 x. Recomputing them
// costs two of the forward's three expert GEMMs again (a quarter of the
// experts' backward); keeping them costs [..., k, 2, F] floats per layer
// from the forward to the backward. The default keeps them: the forward
// gains its `hidden` result, and the gradient that reads the same tokens,
// routing and weights takes it as an operand. moe-rematerialize drops them
// again, layer by layer, when a memory budget needs the room
// (dropExpertActivations), as it recomputes any other saved activation.
//
// Expert-parallel layers keep recomputing: their rows are computed on the
// experts' ranks, which the per-rank program's buffers do not describe.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_SAVEEXPERTACTIVATIONS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

/// `op` again with `resultTypes` and `operands`, its attributes and place;
/// its uses move to the same results of the copy, which replaces it.
static Operation *rebuild(Operation *op, TypeRange resultTypes,
                          ValueRange operands) {
  OpBuilder builder(op);
  OperationState state(op->getLoc(), op->getName());
  state.addOperands(operands);
  state.addTypes(resultTypes);
  state.addAttributes(op->getAttrDictionary().getValue());
  Operation *copy = builder.create(state);
  for (auto [old, now] : llvm::zip(op->getResults(), copy->getResults()))
    old.replaceAllUsesWith(now);
  op->erase();
  return copy;
}

/// Whether `grad` differentiates `experts`: the same tokens, routing,
/// weights and FP8 recipe.
static bool differentiates(ExpertsGradOp grad, ExpertsOp experts) {
  return grad.getInput() == experts.getInput() &&
         grad.getWeights() == experts.getWeights() &&
         grad.getIndices() == experts.getIndices() &&
         grad.getW1() == experts.getW1() && grad.getW3() == experts.getW3() &&
         grad.getW2() == experts.getW2() &&
         grad.getFp8Attr() == experts.getFp8Attr() &&
         grad.getFp8BlockAttr() == experts.getFp8BlockAttr() &&
         grad.getFp8HistoryAttr() == experts.getFp8HistoryAttr() &&
         grad->getBlock() == experts->getBlock();
}

RankedTensorType mlir::moe::expertHiddenType(ExpertsOp experts) {
  SmallVector<int64_t> shape(experts.getIndices().getType().getShape());
  shape.push_back(2);
  shape.push_back(experts.getW1().getType().getShape()[1]);
  return RankedTensorType::get(shape, Float32Type::get(experts.getContext()));
}

unsigned mlir::moe::saveExpertActivations(func::FuncOp step) {
  SmallVector<ExpertsOp> layers;
  step.walk([&](ExpertsOp experts) {
    if (!experts.getHidden() && !experts.getExpertAxes())
      layers.push_back(experts);
  });
  unsigned saved = 0;
  for (ExpertsOp experts : layers) {
    SmallVector<ExpertsGradOp> grads;
    for (Operation *user : experts.getInput().getUsers())
      if (auto grad = dyn_cast<ExpertsGradOp>(user))
        if (!grad.getHidden() && differentiates(grad, experts))
          grads.push_back(grad);
    if (grads.empty())
      continue;
    Operation *kept = rebuild(
        experts, {experts.getResult().getType(), expertHiddenType(experts)},
        experts->getOperands());
    Value hidden = kept->getResult(1);
    for (ExpertsGradOp grad : grads) {
      SmallVector<Value> operands(grad->getOperands());
      operands.push_back(hidden);
      rebuild(grad, grad->getResultTypes(), operands);
    }
    ++saved;
  }
  return saved;
}

ExpertsOp mlir::moe::dropExpertActivations(ExpertsOp experts) {
  Value hidden = experts.getHidden();
  if (!hidden)
    return experts;
  // Every reader is a gradient taking it as its last operand.
  SmallVector<Operation *> readers(hidden.getUsers());
  for (Operation *reader : readers) {
    ValueRange operands = reader->getOperands();
    rebuild(reader, reader->getResultTypes(), operands.drop_back());
  }
  return cast<ExpertsOp>(
      rebuild(experts, experts.getResult().getType(), experts->getOperands()));
}

namespace {
struct SaveExpertActivationsPass
    : public mlir::moe::impl::SaveExpertActivationsBase<
          SaveExpertActivationsPass> {
  using SaveExpertActivationsBase::SaveExpertActivationsBase;
  void runOnOperation() override {
    FailureOr<func::FuncOp> step =
        lookupFunction(getOperation(), function, "to save activations in");
    if (failed(step))
      return signalPassFailure();
    saveExpertActivations(*step);
  }
};
} // namespace
