//===- MixedPrecision.cpp - BF16 storage with fp32 master weights ---------===//
//
// The recipe of docs/precision.md, decided on the whole training step
// (forward, backward and optimizer) at once: the optimizer keeps fp32
// masters and moments, everything the forward and backward store is BF16
// except the values the recipe keeps in fp32 for accuracy (the router's
// logits, probabilities and weights, attention statistics, losses and
// scalars) and the weight gradients, which are fp32 unless they are
// reduced in BF16.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/PrecisionRecipe.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

/// Whether `use` is an operand the dialect keeps in fp32 (MoE_F32Tensor):
/// what the router and the aux loss read, the top-k weights, attention's
/// statistics, and what the optimizer reads.
static bool readsF32(OpOperand &use) {
  Operation *op = use.getOwner();
  Value value = use.get();
  if (isa<RouterOp, AuxLossOp, RouterGradOp, AuxLossGradOp, ZLossOp,
          ZLossGradOp, GlobalNormOp, ClipCoefficientOp, WeightedSumOp>(op))
    return true;
  if (auto loss = dyn_cast<SequenceAuxLossOp>(op))
    return value == loss.getProbs();
  if (auto lossGrad = dyn_cast<SequenceAuxLossGradOp>(op))
    return value != lossGrad.getIndices();
  if (auto experts = dyn_cast<ExpertsOp>(op))
    return value == experts.getWeights();
  if (auto expertsGrad = dyn_cast<ExpertsGradOp>(op))
    return value == expertsGrad.getWeights() ||
           value == expertsGrad.getHidden();
  if (auto attentionGrad = dyn_cast<AttentionGradOp>(op))
    return value == attentionGrad.getLse();
  if (auto lossGrad = dyn_cast<LinearCrossEntropyGradOp>(op))
    return value == lossGrad.getLse();
  if (auto update = dyn_cast<AdamWUpdateOp>(op))
    return value == update.getGrad();
  return false;
}

/// Whether the dialect keeps `result` in fp32 whatever it is computed from.
static bool producesF32(OpResult result) {
  Operation *op = result.getOwner();
  auto type = dyn_cast<RankedTensorType>(result.getType());
  if (!type || !type.getElementType().isF32() || type.getRank() == 0)
    return true;
  if (isa<RouterOp, RouterGradOp, AuxLossGradOp, SequenceAuxLossGradOp,
          ZLossGradOp, ConstantOp>(op))
    return true;
  // A sum of fp32 values stays fp32: the gradient of gate logits that the
  // router and the z-loss both read. (The ops before it have their final
  // types: the pass runs in order.)
  if (isa<AddOp>(op) && llvm::all_of(op->getOperandTypes(), [](Type type) {
        return cast<ShapedType>(type).getElementType().isF32();
      }))
    return true;
  if (auto attention = dyn_cast<AttentionOp>(op))
    return result == attention.getLse();
  if (auto loss = dyn_cast<LinearCrossEntropyOp>(op))
    return result == loss.getLse();
  if (auto experts = dyn_cast<ExpertsOp>(op))
    return result == experts.getHidden();
  if (auto expertsGrad = dyn_cast<ExpertsGradOp>(op))
    return result == expertsGrad.getWeightsGrad();
  return false;
}

static RankedTensorType withElement(Value value, Type element) {
  return cast<RankedTensorType>(value.getType()).clone(element);
}

/// Declares the BF16 working copy of every weight after it; returns them by
/// master name.
static FailureOr<llvm::DenseMap<StringAttr, ParamOp>>
declareWorkingCopies(ModuleOp module) {
  llvm::DenseMap<StringAttr, ParamOp> copies;
  Builder types(module.getContext());
  SmallVector<ParamOp> weights;
  for (ParamOp param : module.getOps<ParamOp>()) {
    if (param.getKind() == ParamKind::working_copy)
      return param.emitOpError()
             << "is already a working copy: the step is already in mixed "
                "precision (moe-mixed-precision runs once)";
    if (param.getKind() == ParamKind::weight)
      weights.push_back(param);
  }
  for (ParamOp master : weights) {
    std::string name = (master.getSymName() + ".bf16").str();
    if (module.lookupSymbol(name))
      return master.emitOpError()
             << "cannot declare its working copy: the module already has a "
                "symbol named '"
             << name << "'";
    OpBuilder builder(master->getBlock(), std::next(master->getIterator()));
    copies[master.getSymNameAttr()] = builder.create<ParamOp>(
        master.getLoc(), name,
        master.getTensorType().clone(types.getBF16Type()), InitKind::none,
        FloatAttr(), ParamKind::working_copy, /*no_weight_decay=*/false,
        master.getShardingAttr(), master.getShardingOriginAttr(),
        FlatSymbolRefAttr::get(master.getSymNameAttr()));
  }
  return copies;
}

LogicalResult mlir::moe::applyMixedPrecision(func::FuncOp step,
                                             const PrecisionRecipe &recipe) {
  if (!recipe.isMixed())
    return success();
  if (!step.getBody().hasOneBlock())
    return step.emitOpError() << "expected a single-block function";
  auto module = step->getParentOfType<ModuleOp>();
  if (recipe.gradReduce == Precision::bf16) {
    // The runtime sums a step's microbatch gradients in the gradients'
    // dtype; the recipe sums them in fp32 (docs/precision.md).
    if (auto microbatches =
            module->getAttrOfType<IntegerAttr>(kMicrobatchesAttrName);
        microbatches && microbatches.getInt() > 1)
      return step.emitOpError()
             << "--grad-reduce-dtype=bf16 with " << microbatches.getInt()
             << " microbatches is not supported: gradients summed over "
                "microbatches are summed in fp32 (use "
                "--grad-reduce-dtype=fp32)";
  }
  FailureOr<llvm::DenseMap<StringAttr, ParamOp>> copies =
      declareWorkingCopies(module);
  if (failed(copies))
    return failure();

  Builder builder(step.getContext());
  Type bf16 = builder.getBF16Type(), f32 = builder.getF32Type();
  SymbolTable symbols(module);
  Block &body = step.getBody().front();

  // The gradients the optimizer applies, by the weight they update.
  // In the optimizer's order, so the casts come out in a fixed order.
  llvm::SetVector<Value> weightGrads;
  for (auto update : body.getOps<AdamWUpdateOp>()) {
    weightGrads.insert(update.getGrad());
    auto found = copies->find(update.getParamAttr().getAttr());
    if (found != copies->end())
      update.setWorkingCopyAttr(
          FlatSymbolRefAttr::get(found->second.getSymNameAttr()));
  }

  // A weight read twice (tied embeddings) has its gradient summed from two
  // parts, which are weight gradients too and take its dtype.
  llvm::DenseSet<Value> weightGradParts;
  SmallVector<Value> partsToVisit(weightGrads.begin(), weightGrads.end());
  while (!partsToVisit.empty()) {
    Value part = partsToVisit.pop_back_val();
    if (!weightGradParts.insert(part).second)
      continue;
    if (auto sum = part.getDefiningOp<AddOp>())
      partsToVisit.append({sum.getLhs(), sum.getRhs()});
  }

  for (Operation &op : body) {
    if (auto read = dyn_cast<GetParamOp>(op)) {
      auto found = copies->find(read.getParamAttr().getAttr());
      if (found == copies->end())
        continue; // optimizer state and FP8 histories stay fp32
      read.setParamAttr(FlatSymbolRefAttr::get(found->second.getSymNameAttr()));
      read.getResult().setType(found->second.getTensorType());
      continue;
    }
    for (OpResult result : op.getResults()) {
      if (producesF32(result))
        continue;
      if (weightGradParts.contains(result)) {
        if (recipe.gradReduce == Precision::bf16)
          result.setType(withElement(result, bf16));
        continue;
      }
      // A value an fp32-only operand reads is computed in fp32: the gate
      // GEMM writes the router's logits in fp32, so top-k decides on them.
      if (llvm::any_of(result.getUses(), readsF32))
        continue;
      result.setType(withElement(result, bf16));
    }
  }

  // BF16 weight gradients are reduced in BF16 (moe-partition places the
  // reduction before the cast) and widened once for the optimizer.
  if (recipe.gradReduce == Precision::bf16) {
    auto norms = body.getOps<GlobalNormOp>();
    if (norms.empty())
      return step.emitOpError() << "has no moe.global_norm to widen the "
                                   "BF16 weight gradients for";
    OpBuilder casts(*norms.begin());
    for (Value grad : weightGrads) {
      auto type = cast<RankedTensorType>(grad.getType());
      if (!type.getElementType().isBF16())
        continue;
      Value wide = casts.create<CastOp>(grad.getLoc(), type.clone(f32), grad);
      grad.replaceUsesWithIf(wide, [&](OpOperand &use) {
        return isa<GlobalNormOp, AdamWUpdateOp>(use.getOwner());
      });
    }
  }

  // Every fp32-only operand must now read fp32; anything else is a value
  // the rules above turned BF16 by mistake.
  for (Operation &op : body)
    for (OpOperand &use : op.getOpOperands())
      if (readsF32(use) && !cast<ShapedType>(use.get().getType())
                                .getElementType()
                                .isF32())
        return op.emitOpError()
               << "operand " << use.getOperandNumber()
               << " must stay fp32 under mixed precision, got "
               << use.get().getType();
  recordPrecision(module, recipe);
  return success();
}

namespace {
struct MixedPrecisionPass
    : public mlir::moe::impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string error;
    FailureOr<PrecisionRecipe> recipe =
        resolvePrecision(precision, gradReduceDtype, module, target, error);
    if (failed(recipe)) {
      module.emitError() << error;
      return signalPassFailure();
    }
    // resolvePrecision knows the target: what counts its backend's scratch
    // (kernelWorkspaceBytes) reads it from here.
    module->setAttr(kTargetAttrName, StringAttr::get(&getContext(), target));
    if (!recipe->isMixed()) {
      recordPrecision(module, *recipe);
      return;
    }
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to apply mixed precision to");
    if (failed(step) || failed(applyMixedPrecision(*step, *recipe)))
      return signalPassFailure();
  }
};
} // namespace
