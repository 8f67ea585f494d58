//===- Fp8.cpp - mark the GEMMs that run in FP8 ---------------------------===//
//
// The pass decides per target: where GEMMs cannot read FP8 (the A100), FP8
// is kept for what it can still do there, the expert token dispatch, and the
// GEMMs stay in full precision. Delayed scaling declares one amax history
// per expert layer, a persistent parameter the step updates; moe-optimizer
// ends its step.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Target.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_FP8
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

static_assert(kFp8HistoryRoles == ::moe::rt::cpu::kFp8ExpertRoles,
              "the compiler's amax histories are the kernels'");

/// The amax history's name: the experts' own prefix (w1's HF name up to
/// "{e}.", "<block>.experts.") with "fp8_amax_history", or a numbered name
/// for experts whose weights are not stacked parameters.
static std::string historyName(ExpertsOp experts, unsigned index) {
  if (auto read = experts.getW1().getDefiningOp<GetParamOp>()) {
    StringRef w1 = read.getParam();
    size_t stacked = w1.find("{e}.");
    if (stacked != StringRef::npos)
      return (w1.take_front(stacked) + "fp8_amax_history").str();
  }
  return ("fp8_amax_history." + Twine(index)).str();
}

/// Declares the zero-initialised amax history of `experts` before
/// `function`.
static ParamOp declareHistory(func::FuncOp function, ExpertsOp experts,
                              unsigned index, int64_t pastSteps) {
  OpBuilder builder(function);
  int64_t numExperts =
      cast<ShapedType>(experts.getW1().getType()).getDimSize(0);
  auto type = RankedTensorType::get(
      {numExperts, kFp8HistoryRoles, pastSteps + 1}, builder.getF32Type());
  return builder.create<ParamOp>(
      experts.getLoc(), historyName(experts, index), type, InitKind::zeros,
      FloatAttr(), ParamKind::fp8_history, /*no_weight_decay=*/true,
      ShardingAttr(), /*sharding_origin=*/ArrayAttr(),
      /*master=*/FlatSymbolRefAttr());
}

LogicalResult mlir::moe::applyFp8(func::FuncOp function,
                                  const Fp8Policy &policy) {
  if (policy.gemms != "experts" && policy.gemms != "none")
    return function.emitOpError()
           << "fp8 for the '" << policy.gemms
           << "' GEMMs is not supported: choose 'experts' or 'none'";
  if (policy.block <= 0 || policy.block > 65536)
    return function.emitOpError()
           << "expected an fp8 block in [1, 65536], found " << policy.block;
  if (policy.scaling == Fp8Scaling::delayed &&
      (policy.pastSteps < 1 || policy.pastSteps > 65536))
    return function.emitOpError()
           << "expected an fp8 amax history of [1, 65536] steps, found "
           << policy.pastSteps;
  bool gemms = policy.gemms == "experts";
  bool dispatch = policy.dispatch;
  const Target &target = policy.target;
  const ::moe::caps::Capabilities &caps = target.capabilities;
  if (gemms && !target.fp8Gemms()) {
    // Storage and communication only: the tokens still travel in FP8.
    function.emitWarning()
        << "target '" << target.name << "' (sm_" << target.computeCapability
        << ") has no fp8 tensor cores: the expert GEMMs stay in full "
           "precision, and fp8 carries only the expert token dispatch";
    gemms = false;
    dispatch = true;
  }
  if (!gemms && !dispatch)
    return function.emitOpError()
           << "has nothing to run in fp8: no GEMMs and no dispatch";
  StringRef recipe = stringifyFp8Scaling(policy.scaling);
  if (gemms && !target.hasFp8Recipe(recipe))
    return function.emitOpError()
           << "needs fp8 recipe " << recipe << "; target '" << target.name
           << "' (" << target.backend() << " backend) lacks it ("
           << ::moe::caps::kFp8RecipesName << ": "
           << ::moe::caps::recipeList(caps) << ")";
  if (gemms && policy.scaling == Fp8Scaling::blockwise &&
      !caps.runsFp8Block(policy.block))
    return function.emitOpError()
           << "needs fp8 blocks of " << policy.block << "; target '"
           << target.name << "' (" << target.backend() << " backend) lacks it ("
           << ::moe::caps::kFp8BlockName << ": " << caps.fp8Block << ")";
  if (dispatch && !caps.fp8Dispatch)
    // The CPU backend still runs it, emulating the target.
    function.emitWarning()
        << "target '" << target.name << "' (" << target.backend()
        << " backend) lacks " << ::moe::caps::kFp8DispatchName
        << ": the artifact's fp8 token dispatch runs on the cpu backend only";

  Builder builder(function.getContext());
  unsigned marked = 0;
  SmallVector<ExpertsOp> layers;
  function.walk([&](ExpertsOp experts) { layers.push_back(experts); });
  for (ExpertsOp experts : layers) {
    auto w1 = cast<ShapedType>(experts.getW1().getType());
    int64_t align = caps.fp8GemmAlignment;
    if (gemms && (w1.getDimSize(1) % align || w1.getDimSize(2) % align))
      return experts.emitOpError()
             << "needs fp8 GEMMs of hidden " << w1.getDimSize(2) << " and ffn "
             << w1.getDimSize(1) << "; target '" << target.name << "' ("
             << target.backend() << " backend) lacks it ("
             << ::moe::caps::kFp8GemmAlignmentName << ": multiples of "
             << align << ")";
    if (gemms) {
      experts.setFp8Attr(
          Fp8ScalingAttr::get(function.getContext(), policy.scaling));
      if (policy.scaling == Fp8Scaling::delayed) {
        ParamOp history =
            declareHistory(function, experts, marked, policy.pastSteps);
        experts.setFp8HistoryAttr(
            FlatSymbolRefAttr::get(history.getSymNameAttr()));
      }
    }
    if ((gemms && policy.scaling == Fp8Scaling::blockwise) || !gemms)
      experts.setFp8BlockAttr(builder.getI64IntegerAttr(policy.block));
    if (dispatch)
      experts.setFp8Dispatch(true);
    ++marked;
  }
  if (marked == 0)
    return function.emitOpError()
           << "has no expert GEMMs to run in fp8 (a dense model?)";
  return success();
}

namespace {
struct Fp8Pass : public mlir::moe::impl::Fp8Base<Fp8Pass> {
  using Fp8Base::Fp8Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Fp8Scaling> parsed = symbolizeFp8Scaling(scaling);
    if (!parsed) {
      module.emitError() << "unknown fp8 scaling '" << scaling
                         << "': expected tensorwise, blockwise or delayed";
      return signalPassFailure();
    }
    const Target *known = lookupTarget(target);
    if (!known) {
      module.emitError() << "unknown target '" << target
                         << "': expected " << knownTargetList();
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> forward =
        lookupFunction(module, function, "to run in fp8");
    Fp8Policy policy{gemms, *parsed, block, dispatch, amaxHistory, *known};
    if (failed(forward) || failed(applyFp8(*forward, policy)))
      return signalPassFailure();
  }
};
} // namespace
