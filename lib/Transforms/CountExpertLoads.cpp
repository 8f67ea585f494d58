//===- CountExpertLoads.cpp - each router's per-expert load ---------------===//
//
// A router's load (the assignments it admitted per expert over a step's
// tokens) is what a user watches to see experts collapse or balance, and
// what DeepSeek-V3's auxiliary-loss-free balancing moves its bias by. The
// counter is persistent state the forward adds to and the step's end
// clears, so it survives the microbatches of a step.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Target.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_COUNTEXPERTLOADS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

ExpertLoadOp mlir::moe::addExpertLoad(OpBuilder &moduleBuilder, RouterOp router,
                                      StringRef name, FlatSymbolRefAttr bias,
                                      FloatAttr rate) {
  int64_t experts =
      cast<RankedTensorType>(router.getLogits().getType()).getShape().back();
  auto type = RankedTensorType::get({experts}, moduleBuilder.getF32Type());
  auto counter = moduleBuilder.create<ParamOp>(
      router.getLoc(), name, type, InitKind::zeros, FloatAttr(),
      ParamKind::expert_load, /*no_weight_decay=*/true,
      /*sharding=*/ShardingAttr(), /*sharding_origin=*/ArrayAttr(),
      /*master=*/FlatSymbolRefAttr());
  OpBuilder builder(router->getBlock(), std::next(router->getIterator()));
  return builder.create<ExpertLoadOp>(
      router.getLoc(), router.getIndices(),
      FlatSymbolRefAttr::get(counter.getSymNameAttr()), bias,
      rate ? rate : builder.getF32FloatAttr(0.0f), /*token_axes=*/ArrayAttr());
}

/// "<gate>.tokens_per_expert" for a router of the logits of
/// moe.linear(x, get_param @<gate>.weight), moec's HF naming; else
/// "router.<ordinal>.tokens_per_expert".
static std::string counterName(RouterOp router, unsigned ordinal) {
  if (auto gate = router.getLogits().getDefiningOp<LinearOp>())
    if (auto weight = gate.getWeight().getDefiningOp<GetParamOp>()) {
      StringRef name = weight.getParamAttr().getValue();
      if (name.consume_back(".weight"))
        return (name + ".tokens_per_expert").str();
    }
  return "router." + std::to_string(ordinal) + ".tokens_per_expert";
}

unsigned mlir::moe::countExpertLoads(func::FuncOp forward) {
  auto module = forward->getParentOfType<ModuleOp>();
  SymbolTable symbols(module);
  // The counters are declared with the other parameters, before the
  // functions.
  OpBuilder moduleBuilder(forward);
  unsigned added = 0, ordinal = 0;
  SmallVector<RouterOp> routers(forward.getOps<RouterOp>());
  for (RouterOp router : routers) {
    unsigned index = ordinal++;
    bool counted =
        llvm::any_of(router.getIndices().getUsers(),
                     [](Operation *user) { return isa<ExpertLoadOp>(user); });
    if (counted)
      continue;
    std::string name = counterName(router, index);
    // A name already taken (a hand-written module) gets a fresh one.
    if (symbols.lookup(name))
      name = "router." + std::to_string(index) + ".tokens_per_expert";
    addExpertLoad(moduleBuilder, router, name, FlatSymbolRefAttr(),
                  FloatAttr());
    ++added;
  }
  return added;
}

namespace {
struct CountExpertLoadsPass
    : public mlir::moe::impl::CountExpertLoadsBase<CountExpertLoadsPass> {
  using CountExpertLoadsBase::CountExpertLoadsBase;
  void runOnOperation() override {
    // A backend without the counters reports no loads: null.
    FailureOr<func::FuncOp> forward = lookupFusionFunction(
        getOperation(), function, target,
        [](const Target &t) { return t.capabilities.scoredRouters; },
        "to count expert loads in");
    if (failed(forward))
      return signalPassFailure();
    if (*forward)
      countExpertLoads(*forward);
  }
};
} // namespace
