//===- SplitBatch.cpp - moe-split-batch: one microbatch's step ------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipeline.h"

namespace mlir::moe {
#define GEN_PASS_DEF_SPLITBATCH
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

LogicalResult mlir::moe::splitBatch(ModuleOp module, uint64_t batch,
                                    unsigned microbatches) {
  if (microbatches == 0)
    return module.emitError() << "expected at least one microbatch";
  if (batch == 0 && microbatches == 1)
    return success();
  bool found = false;
  for (auto transformer : module.getOps<TransformerOp>()) {
    found = true;
    if (batch > 0)
      transformer.setBatch(batch);
    uint64_t sequences = transformer.getBatch();
    if (sequences % microbatches != 0)
      return transformer.emitError()
             << "--microbatches " << microbatches
             << " does not divide the batch of " << sequences << " sequences";
    transformer.setBatch(sequences / microbatches);
  }
  if (!found)
    return module.emitError() << "--microbatches needs the model's batch "
                                 "(moe.transformer)";
  if (microbatches > 1)
    module->setAttr(kMicrobatchesAttrName,
                    Builder(module.getContext()).getI64IntegerAttr(microbatches));
  return success();
}

namespace {
struct SplitBatchPass : public mlir::moe::impl::SplitBatchBase<SplitBatchPass> {
  using SplitBatchBase::SplitBatchBase;
  void runOnOperation() override {
    if (failed(splitBatch(getOperation(), batch, microbatches)))
      signalPassFailure();
  }
};
} // namespace
