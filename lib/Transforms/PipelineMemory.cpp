//===- PipelineMemory.cpp - what each pipeline rank holds -----------------===//
//
// A pipelined step keeps each parameter, its moments and an FP8 amax
// history on the rank of the stage that updates it, and one arena slot per
// microbatch the rank holds at once (the schedule says how many). The
// memory report and moe-rematerialize's budget both count it this way, as
// the runtime allocates it (engine::pipelineRankBytes).
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Transforms.h"

using namespace mlir;
using namespace mlir::moe;

std::optional<int64_t> mlir::moe::pipelineRankRunning(Operation *op,
                                                      int64_t ranks) {
  auto stage = op->getAttrOfType<IntegerAttr>(kPipelineStageAttrName);
  if (!stage || stage.getInt() < 0)
    return std::nullopt;
  return stage.getInt() % ranks;
}

SmallVector<PipelineRankMemory>
mlir::moe::pipelineRankMemory(ModuleOp module, func::FuncOp step) {
  auto ranksAttr = step->getAttrOfType<IntegerAttr>(kPipelineRanksAttrName);
  if (!ranksAttr || ranksAttr.getInt() < 1)
    return {};
  int64_t ranks = ranksAttr.getInt();
  SmallVector<PipelineRankMemory> memory(ranks);
  for (auto [rank, each] : llvm::enumerate(memory))
    each.workspaceBytes =
        kernelWorkspaceBytes(module, step, static_cast<int64_t>(rank), ranks);
  if (auto slots = step->getAttrOfType<DenseI64ArrayAttr>(kPipelineSlotsAttrName))
    for (auto [rank, count] : llvm::enumerate(slots.asArrayRef()))
      if (static_cast<int64_t>(rank) < ranks)
        memory[rank].slots = count;

  SymbolTable symbols(module);
  auto bytesOf = [&](FlatSymbolRefAttr ref) -> uint64_t {
    auto param = symbols.lookup<ParamOp>(ref.getAttr());
    return param ? tensorBytes(param.getTensorType()) : 0;
  };
  auto rankOf = [&](Operation *op) { return pipelineRankRunning(op, ranks); };
  // Sums saturate instead of wrapping (tensors are bounded, their number
  // is not).
  auto add = [](uint64_t &sum, uint64_t value) {
    sum = llvm::SaturatingAdd(sum, value);
  };
  step.walk([&](AdamWUpdateOp update) {
    if (std::optional<int64_t> rank = rankOf(update)) {
      add(memory[*rank].paramBytes, bytesOf(update.getParamAttr()));
      add(memory[*rank].optimizerStateBytes, bytesOf(update.getExpAvgAttr()));
      add(memory[*rank].optimizerStateBytes,
          bytesOf(update.getExpAvgSqAttr()));
    }
  });
  step.walk([&](Fp8AmaxUpdateOp update) {
    if (std::optional<int64_t> rank = rankOf(update))
      add(memory[*rank].fp8HistoryBytes, bytesOf(update.getHistoryAttr()));
  });
  // A router's load counter and bias live with their update (the stage of
  // the router), counted with the moments.
  step.walk([&](ExpertLoadUpdateOp update) {
    if (std::optional<int64_t> rank = rankOf(update)) {
      add(memory[*rank].optimizerStateBytes, bytesOf(update.getLoadAttr()));
      if (FlatSymbolRefAttr bias = update.getBiasAttr())
        add(memory[*rank].optimizerStateBytes, bytesOf(bias));
    }
  });
  // The optimizer of a rank (and the one of every rank, such as the global
  // norm) reads sums over the microbatches of what that rank computed.
  auto isOptimizer = [](Operation *op) {
    auto phase = op->getAttrOfType<StringAttr>(kPipelinePhaseAttrName);
    return phase && phase.getValue() == "optimizer";
  };
  SmallVector<llvm::DenseSet<Value>> summed(ranks);
  step.walk([&](Operation *op) {
    if (!isOptimizer(op))
      return;
    std::optional<int64_t> rank = rankOf(op);
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      std::optional<int64_t> from = def ? rankOf(def) : std::nullopt;
      if (!def || isOptimizer(def) || !from || (rank && *rank != *from))
        continue;
      if (summed[*from].insert(operand).second)
        add(memory[*from].gradientSumBytes, tensorBytes(operand.getType()));
    }
  });
  return memory;
}
