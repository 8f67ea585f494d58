//===- PrintShardingRules.cpp - show the factor rule of every op ----------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

namespace mlir::moe {
#define GEN_PASS_DEF_PRINTSHARDINGRULES
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct PrintShardingRulesPass
    : public mlir::moe::impl::PrintShardingRulesBase<PrintShardingRulesPass> {
  void runOnOperation() override {
    WalkResult result = getOperation().walk([](Operation *op) {
      auto ruled = dyn_cast<ShardingRuleOpInterface>(op);
      if (!ruled)
        return WalkResult::advance();
      FailureOr<ShardingRule> rule = ruled.getShardingRule();
      if (failed(rule))
        return WalkResult::interrupt();
      std::string pinned;
      for (const ShardingRule::Factor &factor : rule->getFactors())
        if (factor.pinned)
          pinned += (pinned.empty() ? "" : " ") + factor.name;
      InFlightDiagnostic remark = op->emitRemark() << "sharding rule: "
                                                   << rule->str();
      if (!pinned.empty())
        remark << "; pinned: " << pinned;
      if (!rule->partialResultsAreSums())
        remark << "; partial results are not sums";
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
