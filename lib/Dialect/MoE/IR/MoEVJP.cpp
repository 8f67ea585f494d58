//===- MoEVJP.cpp - vector-Jacobian products of the moe ops ---------------===//
//
// One rule per differentiable op (docs/semantics.md, "Backward"). Each rule
// only builds the gradient ops; accumulating the contributions of a value
// used several times is the job of the autodiff driver.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::moe;

/// A zero tensor standing in for a missing result gradient of an op whose
/// rule needs all of them.
static Value zerosLike(OpBuilder &builder, Location loc, Value like) {
  return builder.create<ConstantOp>(loc, like.getType(),
                                    builder.getF32FloatAttr(0.0f));
}

SmallVector<Value> EmbeddingOp::buildVJP(OpBuilder &builder,
                                         ValueRange resultGrads) {
  Value dtable = builder.create<EmbeddingGradOp>(
      getLoc(), getTable().getType(), resultGrads[0], getTokens());
  return {Value(), dtable};
}

SmallVector<Value> RMSNormOp::buildVJP(OpBuilder &builder,
                                       ValueRange resultGrads) {
  auto grad = builder.create<RMSNormGradOp>(
      getLoc(), getInput().getType(), getWeight().getType(), resultGrads[0],
      getInput(), getWeight(), getEpsilonAttr(), getNumHeadsAttr());
  return {grad.getInputGrad(), grad.getWeightGrad()};
}

SmallVector<Value> LinearOp::buildVJP(OpBuilder &builder,
                                      ValueRange resultGrads) {
  Value dx = builder.create<LinearGradInputOp>(
      getLoc(), getInput().getType(), resultGrads[0], getWeight(), Value());
  Value dw = builder.create<LinearGradWeightOp>(
      getLoc(), getWeight().getType(), resultGrads[0], getInput());
  // The addend's gradient is the result's.
  if (getAddend())
    return {dx, dw, resultGrads[0]};
  return {dx, dw};
}

SmallVector<Value> RoPEOp::buildVJP(OpBuilder &builder,
                                    ValueRange resultGrads) {
  Value dx = builder.create<RoPEGradOp>(
      getLoc(), getInput().getType(), resultGrads[0], getPositions(),
      getNumHeadsAttr(), getThetaAttr(), getSequenceAxesAttr(),
      getScalingAttr());
  // Positions are ids: no gradient.
  if (getPositions())
    return {dx, Value()};
  return {dx};
}

SmallVector<Value> ConcatHeadsOp::buildVJP(OpBuilder &builder,
                                           ValueRange resultGrads) {
  auto split = builder.create<SplitHeadsOp>(getLoc(), getLhs().getType(),
                                            getRhs().getType(), resultGrads[0],
                                            getNumHeadsAttr());
  return {split.getLhs(), split.getRhs()};
}

SmallVector<Value> SplitHeadsOp::buildVJP(OpBuilder &builder,
                                          ValueRange resultGrads) {
  // A part nothing reads has a zero gradient.
  Value lhs =
      resultGrads[0] ? resultGrads[0] : zerosLike(builder, getLoc(), getLhs());
  Value rhs =
      resultGrads[1] ? resultGrads[1] : zerosLike(builder, getLoc(), getRhs());
  return {builder.create<ConcatHeadsOp>(getLoc(), getInput().getType(), lhs,
                                        rhs, getNumHeadsAttr())};
}

SmallVector<Value> AttentionOp::buildVJP(OpBuilder &builder,
                                         ValueRange resultGrads) {
  // The log-sum-exp only feeds attention_grad, so no gradient reaches it
  // from the loss; the output's gradient is all there is.
  SmallVector<Value> grads(getNumOperands());
  if (!resultGrads[0])
    return grads;
  auto grad = builder.create<AttentionGradOp>(
      getLoc(), getQuery().getType(), getKey().getType(), getValue().getType(),
      resultGrads[0], getQuery(), getKey(), getValue(), getOutput(), getLse(),
      getPositions(), getNumHeadsAttr(), getNumKvHeadsAttr(),
      getSequenceAxesAttr(), getRingAttr(), getScaleFactorAttr());
  // Positions are ids: no gradient.
  grads[0] = grad.getQueryGrad();
  grads[1] = grad.getKeyGrad();
  grads[2] = grad.getValueGrad();
  return grads;
}

SmallVector<Value> RouterOp::buildVJP(OpBuilder &builder,
                                      ValueRange resultGrads) {
  Value dprobs = resultGrads[0];
  Value dweights = resultGrads[1];
  if (!dweights)
    dweights = zerosLike(builder, getLoc(), getWeights());
  // The artifact's general router gradient reads the scores' gradient
  // always (its one optional operand is the bias); Mixtral's may omit it.
  if (!dprobs && !isMixtralRouter())
    dprobs = zerosLike(builder, getLoc(), getProbs());
  Value dlogits = builder.create<RouterGradOp>(
      getLoc(), getLogits().getType(), dweights, getProbs(), dprobs, getBias(),
      getTopKAttr(), getScoringAttr(), getNormalizeAttr(), getScaleAttr(),
      getGroupsAttr(), getTopGroupsAttr());
  // The bias only steers the selection: no gradient.
  if (getBias())
    return {dlogits, Value()};
  return {dlogits};
}

SmallVector<Value> ExpertsOp::buildVJP(OpBuilder &builder,
                                       ValueRange resultGrads) {
  auto grad = builder.create<ExpertsGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), getWeights().getType(), getW1().getType(),
                getW3().getType(), getW2().getType()},
      resultGrads[0], getInput(), getWeights(), getIndices(), getW1(), getW3(),
      getW2(), getHidden(), getExpertAxesAttr(), getFp8Attr(),
      getFp8BlockAttr(), getFp8DispatchAttr(), getFp8HistoryAttr());
  return {grad.getInputGrad(), grad.getWeightsGrad(), Value(),
          grad.getW1Grad(),    grad.getW3Grad(),      grad.getW2Grad()};
}

SmallVector<Value> SwiGLUOp::buildVJP(OpBuilder &builder,
                                      ValueRange resultGrads) {
  auto grad = builder.create<SwiGLUGradOp>(getLoc(), getGate().getType(),
                                           getUp().getType(), resultGrads[0],
                                           getGate(), getUp());
  return {grad.getGateGrad(), grad.getUpGrad()};
}

SmallVector<Value> AddOp::buildVJP(OpBuilder &builder,
                                   ValueRange resultGrads) {
  return {resultGrads[0], resultGrads[0]};
}

SmallVector<Value> CrossEntropyOp::buildVJP(OpBuilder &builder,
                                            ValueRange resultGrads) {
  Value dlogits = builder.create<CrossEntropyGradOp>(
      getLoc(), getLogits().getType(), resultGrads[0], getLogits(),
      getTargets(), getTokenAxesAttr());
  return {dlogits, Value()};
}

SmallVector<Value> LinearCrossEntropyOp::buildVJP(OpBuilder &builder,
                                                  ValueRange resultGrads) {
  // The log-sum-exp only feeds the gradient op, like attention's.
  if (!resultGrads[0])
    return {Value(), Value(), Value()};
  auto grad = builder.create<LinearCrossEntropyGradOp>(
      getLoc(), getInput().getType(), getWeight().getType(), resultGrads[0],
      getInput(), getWeight(), getTargets(), getLse(), getTokenAxesAttr());
  return {grad.getInputGrad(), grad.getWeightGrad(), Value()};
}

SmallVector<Value> AuxLossOp::buildVJP(OpBuilder &builder,
                                       ValueRange resultGrads) {
  Value dprobs = builder.create<AuxLossGradOp>(
      getLoc(), getProbs().getType(), resultGrads[0], getProbs(),
      getTopKAttr(), getTokenAxesAttr());
  return {dprobs};
}

SmallVector<Value> SequenceAuxLossOp::buildVJP(OpBuilder &builder,
                                               ValueRange resultGrads) {
  Value dprobs = builder.create<SequenceAuxLossGradOp>(
      getLoc(), getProbs().getType(), resultGrads[0], getProbs(), getIndices(),
      getBatchAxesAttr(), getSequenceAxesAttr());
  return {dprobs, Value()};
}

SmallVector<Value> ZLossOp::buildVJP(OpBuilder &builder,
                                     ValueRange resultGrads) {
  Value dlogits = builder.create<ZLossGradOp>(getLoc(), getLogits().getType(),
                                              resultGrads[0], getLogits(),
                                              getTokenAxesAttr());
  return {dlogits};
}

SmallVector<Value> WeightedSumOp::buildVJP(OpBuilder &builder,
                                           ValueRange resultGrads) {
  SmallVector<Value> grads;
  for (float coefficient : getCoefficients()) {
    // d(sum_i c_i x_i)/dx_i = c_i: a one-term weighted sum scales the seed.
    grads.push_back(builder.create<WeightedSumOp>(
        getLoc(), resultGrads[0].getType(), ValueRange{resultGrads[0]},
        builder.getDenseF32ArrayAttr({coefficient})));
  }
  return grads;
}
