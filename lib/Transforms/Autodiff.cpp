//===- Autodiff.cpp - reverse-mode differentiation of a loss function -----===//
//
// The driver is op-agnostic: every rule lives with its op
// (DifferentiableOpInterface, lib/Dialect/MoE/IR/MoEVJP.cpp). The driver
// seeds the loss with 1, visits ops in reverse, sums gradient contributions
// of values with several uses, and collects parameter gradients through
// moe.get_param.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_AUTODIFF
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Gradients accumulated so far, per value and per parameter symbol.
class GradientMap {
public:
  explicit GradientMap(OpBuilder &builder) : builder(builder) {}

  void accumulate(Value value, Value grad, Location loc) {
    Value &slot = values[value];
    slot = slot ? Value(builder.create<AddOp>(loc, slot, grad)) : grad;
  }
  void accumulateParam(StringAttr param, Value grad, Location loc) {
    Value &slot = params[param];
    slot = slot ? Value(builder.create<AddOp>(loc, slot, grad)) : grad;
  }
  Value lookup(Value value) const { return values.lookup(value); }
  Value lookupParam(StringAttr param) const { return params.lookup(param); }

private:
  OpBuilder &builder;
  llvm::DenseMap<Value, Value> values;
  llvm::DenseMap<StringAttr, Value> params;
};
} // namespace

/// Propagates gradients backwards through one op.
static LogicalResult backpropagate(Operation *op, GradientMap &grads,
                                   OpBuilder &builder) {
  if (auto read = dyn_cast<GetParamOp>(op)) {
    if (Value grad = grads.lookup(read.getResult()))
      grads.accumulateParam(read.getParamAttr().getAttr(), grad, op->getLoc());
    return success();
  }
  SmallVector<Value> resultGrads;
  bool anyGrad = false;
  for (Value result : op->getResults()) {
    resultGrads.push_back(grads.lookup(result));
    anyGrad |= static_cast<bool>(resultGrads.back());
  }
  if (!anyGrad)
    return success();
  auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
  if (!differentiable)
    return op->emitOpError()
           << "is on the path to the loss but has no gradient rule";
  SmallVector<Value> operandGrads =
      differentiable.buildVJP(builder, resultGrads);
  if (operandGrads.size() != op->getNumOperands())
    return op->emitOpError() << "has a gradient rule returning "
                             << operandGrads.size() << " gradients for "
                             << op->getNumOperands() << " operands";
  for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
    if (grad)
      grads.accumulate(operand, grad, op->getLoc());
  return success();
}

LogicalResult mlir::moe::differentiate(func::FuncOp forward) {
  if (!forward.getBody().hasOneBlock())
    return forward.emitOpError() << "expected a single-block function";
  auto returnOp = cast<func::ReturnOp>(forward.getBody().front().back());
  auto scalar = RankedTensorType::get({}, Float32Type::get(forward.getContext()));
  if (returnOp.getNumOperands() != 1 ||
      returnOp.getOperand(0).getType() != scalar)
    return forward.emitOpError()
           << "expected a function returning one tensor<f32> loss";
  auto module = forward->getParentOfType<ModuleOp>();

  OpBuilder builder(returnOp);
  GradientMap grads(builder);
  Value loss = returnOp.getOperand(0);
  grads.accumulate(
      loss,
      builder.create<ConstantOp>(returnOp.getLoc(), scalar,
                                 builder.getF32FloatAttr(1.0f)),
      returnOp.getLoc());

  // Collect first: the walk must not see the ops it creates.
  SmallVector<Operation *> ops;
  for (Operation &op : forward.getBody().front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (failed(backpropagate(op, grads, builder)))
      return failure();

  // Return the loss and one gradient per weight, in declaration order. A
  // weight the loss does not depend on gets an explicit zero gradient, so
  // that every weight has exactly one optimizer update.
  SmallVector<Value> results = {loss};
  SmallVector<Attribute> gradOf;
  for (auto param : module.getOps<ParamOp>()) {
    if (param.getKind() != ParamKind::weight)
      continue;
    Value grad = grads.lookupParam(param.getSymNameAttr());
    if (!grad)
      grad = builder.create<ConstantOp>(param.getLoc(), param.getType(),
                                        builder.getF32FloatAttr(0.0f));
    results.push_back(grad);
    gradOf.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  builder.create<func::ReturnOp>(returnOp.getLoc(), results);
  returnOp.erase();

  forward.setFunctionType(builder.getFunctionType(
      forward.getArgumentTypes(), TypeRange(ValueRange(results))));
  // All result attributes at once: setting them one by one rebuilds the
  // whole list each time, quadratic in the weights.
  SmallVector<DictionaryAttr> resultAttrs = {builder.getDictionaryAttr({})};
  for (Attribute param : gradOf)
    resultAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(kGradOfAttrName, param)));
  forward.setAllResultAttrs(resultAttrs);
  return success();
}

namespace {
struct AutodiffPass : public mlir::moe::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> forward =
        lookupFunction(module, function, "to differentiate");
    if (failed(forward) || failed(differentiate(*forward)))
      return signalPassFailure();
    if (output != function)
      forward->setSymName(output);
  }
};
} // namespace
