//===- Optimizer.cpp - clipping, LR schedule and AdamW in the step --------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_OPTIMIZER
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

AdamWSettings AdamWSettings::fromModule(ModuleOp module) {
  AdamWSettings settings;
  auto configs = module.getOps<AdamWConfigOp>();
  if (configs.empty())
    return settings;
  AdamWConfigOp config = *configs.begin();
  assert(std::next(configs.begin()) == configs.end() &&
         "the optimizer pass refuses several moe.adamw_config ops");
  settings.lr = config.getLr().convertToFloat();
  settings.minLr = config.getMinLr().convertToFloat();
  settings.warmup = config.getWarmup();
  settings.decaySteps = config.getDecaySteps();
  settings.beta1 = config.getBeta1().convertToFloat();
  settings.beta2 = config.getBeta2().convertToFloat();
  settings.eps = config.getEps().convertToFloat();
  settings.weightDecay = config.getWeightDecay().convertToFloat();
  settings.maxGradNorm = config.getMaxGradNorm().convertToFloat();
  return settings;
}

/// Declares a zero-initialised optimizer-state tensor right after `param`.
static ParamOp declareState(ParamOp param, StringRef suffix) {
  OpBuilder builder(param->getBlock(), std::next(param->getIterator()));
  std::string name = (param.getSymName() + suffix).str();
  // The moments live where their parameter lives (FSDP shards all three).
  return builder.create<ParamOp>(param.getLoc(), name, param.getTensorType(),
                                 InitKind::zeros, FloatAttr(),
                                 ParamKind::optimizer_state,
                                 /*no_weight_decay=*/false,
                                 param.getShardingAttr(),
                                 param.getShardingOriginAttr(),
                                 /*master=*/FlatSymbolRefAttr());
}

LogicalResult mlir::moe::appendOptimizerStep(func::FuncOp step,
                                             const AdamWSettings &settings) {
  if (!step.getBody().hasOneBlock())
    return step.emitOpError() << "expected a single-block function";
  auto module = step->getParentOfType<ModuleOp>();
  auto returnOp = cast<func::ReturnOp>(step.getBody().front().back());
  if (returnOp.getNumOperands() < 1)
    return step.emitOpError() << "expected the loss as first result";

  // Pair every tagged gradient with its parameter.
  SymbolTable symbols(module);
  SmallVector<std::pair<ParamOp, Value>> updates;
  for (unsigned i = 1, e = returnOp.getNumOperands(); i < e; ++i) {
    auto ref = step.getResultAttrOfType<FlatSymbolRefAttr>(i, kGradOfAttrName);
    if (!ref)
      return step.emitOpError()
             << "result " << i << " is not tagged with " << kGradOfAttrName;
    auto param = symbols.lookup<ParamOp>(ref.getAttr());
    if (!param)
      return step.emitOpError() << "result " << i << " is the gradient of "
                                << ref << ", which is not a moe.param";
    updates.emplace_back(param, returnOp.getOperand(i));
  }
  if (updates.empty())
    return step.emitOpError() << "has no parameter gradients to apply";

  MLIRContext *ctx = step.getContext();
  Location loc = NameLoc::get(StringAttr::get(ctx, "optimizer"), step.getLoc());
  OpBuilder builder(returnOp);
  auto scalar = RankedTensorType::get({}, builder.getF32Type());
  auto stepType = RankedTensorType::get({}, builder.getI32Type());
  Value stepArg = step.getBody().front().addArgument(stepType, loc);

  SmallVector<Value> gradValues;
  for (auto &update : updates)
    gradValues.push_back(update.second);
  Value norm = builder.create<GlobalNormOp>(loc, scalar, gradValues,
                                           /*input_axes=*/ArrayAttr());
  Value coefficient = builder.create<ClipCoefficientOp>(
      loc, scalar, norm, builder.getF32FloatAttr(settings.maxGradNorm));
  Value lr = builder.create<LearningRateOp>(
      loc, scalar, stepArg, builder.getF32FloatAttr(settings.lr),
      builder.getF32FloatAttr(settings.minLr),
      builder.getI64IntegerAttr(settings.warmup),
      builder.getI64IntegerAttr(settings.decaySteps));
  for (auto [param, grad] : updates) {
    ParamOp expAvg = declareState(param, ".exp_avg");
    ParamOp expAvgSq = declareState(expAvg, "_sq");
    float decay = param.getNoWeightDecay() ? 0.0f : settings.weightDecay;
    builder.create<AdamWUpdateOp>(
        loc, FlatSymbolRefAttr::get(param.getSymNameAttr()),
        FlatSymbolRefAttr::get(expAvg.getSymNameAttr()),
        FlatSymbolRefAttr::get(expAvgSq.getSymNameAttr()), grad, lr,
        coefficient, stepArg, builder.getF32FloatAttr(settings.beta1),
        builder.getF32FloatAttr(settings.beta2),
        builder.getF32FloatAttr(settings.eps), builder.getF32FloatAttr(decay),
        /*working_copy=*/FlatSymbolRefAttr(),
        /*mesh=*/FlatSymbolRefAttr(), /*gather_axes=*/ArrayAttr());
  }
  // Delayed FP8 scaling: each amax history moves on after the step's last
  // GEMM has folded its amaxes in.
  for (ParamOp history : module.getOps<ParamOp>())
    if (history.getKind() == ParamKind::fp8_history)
      builder.create<Fp8AmaxUpdateOp>(
          loc, FlatSymbolRefAttr::get(history.getSymNameAttr()),
          FlatSymbolRefAttr(), ArrayAttr());
  // Each router's load counter ends the step (after its last microbatch
  // has added to it), moving its selection bias if it has one.
  SmallVector<ExpertLoadOp> counters(step.getOps<ExpertLoadOp>());
  for (ExpertLoadOp counter : counters)
    builder.create<ExpertLoadUpdateOp>(loc, counter.getLoadAttr(),
                                       counter.getBiasAttr(),
                                       counter.getBiasUpdateRateAttr());
  Value loss = returnOp.getOperand(0);
  builder.create<func::ReturnOp>(returnOp.getLoc(),
                                 ValueRange{loss, norm, lr});
  returnOp.erase();
  step.setType(builder.getFunctionType(
      step.getBody().front().getArgumentTypes(), {scalar, scalar, scalar}));
  step.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
  return success();
}

namespace {
struct OptimizerPass : public mlir::moe::impl::OptimizerBase<OptimizerPass> {
  using OptimizerBase::OptimizerBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<AdamWConfigOp> configs(module.getOps<AdamWConfigOp>());
    if (configs.size() > 1) {
      configs[1].emitOpError() << "expected one moe.adamw_config per module";
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to add the optimizer step to");
    if (failed(step) ||
        failed(appendOptimizerStep(*step, AdamWSettings::fromModule(module))))
      return signalPassFailure();
    if (output != function)
      step->setSymName(output);
  }
};
} // namespace
