//===- Fp8.cpp - mark the GEMMs that run in FP8 ---------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_FP8
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

LogicalResult mlir::moe::applyFp8(func::FuncOp function, StringRef gemms,
                                  Fp8Scaling scaling, int64_t block,
                                  bool dispatch) {
  if (gemms != "experts")
    return function.emitOpError()
           << "fp8 for the '" << gemms
           << "' GEMMs is not supported: choose 'experts'";
  if (block <= 0 || block > 65536)
    return function.emitOpError()
           << "expected an fp8 block in [1, 65536], found " << block;
  Builder builder(function.getContext());
  unsigned marked = 0;
  function.walk([&](ExpertsOp experts) {
    experts.setFp8Attr(Fp8ScalingAttr::get(function.getContext(), scaling));
    if (scaling == Fp8Scaling::blockwise)
      experts.setFp8BlockAttr(builder.getI64IntegerAttr(block));
    if (dispatch)
      experts.setFp8Dispatch(true);
    ++marked;
  });
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
                         << "': expected tensorwise or blockwise";
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> forward =
        lookupFunction(module, function, "to run in fp8");
    if (failed(forward) || failed(applyFp8(*forward, gemms, *parsed, block, dispatch)))
      return signalPassFailure();
  }
};
} // namespace
