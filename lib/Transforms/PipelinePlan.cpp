//===- PipelinePlan.cpp - cost-balanced pipeline stage cuts ---------------===//
#include "moe/Transforms/Pipeline.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/Support/Format.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;

std::optional<unsigned> mlir::moe::pipelineUnitOfName(StringRef name,
                                                      unsigned layers) {
  if (name.starts_with("model.embed_tokens"))
    return 0u;
  if (name.consume_front("model.layers.")) {
    unsigned layer;
    if (!name.consumeInteger(10, layer) && layer < layers)
      return layer + 1;
    return std::nullopt;
  }
  if (name.starts_with("model.norm") || name.starts_with("lm_head") ||
      name.starts_with("loss"))
    return layers + 1;
  return std::nullopt;
}

std::optional<unsigned> mlir::moe::pipelineUnitOf(Location loc,
                                                  unsigned layers) {
  if (auto named = dyn_cast<NameLoc>(loc))
    return pipelineUnitOfName(named.getName().strref(), layers);
  return std::nullopt;
}

FailureOr<std::vector<PipelineUnit>>
mlir::moe::pipelineUnits(ModuleOp module, func::FuncOp step) {
  auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName);
  auto layersAttr = model ? model.getAs<IntegerAttr>("layers") : IntegerAttr();
  if (!layersAttr)
    return module.emitError()
           << "pipeline stages need the model's layers (moe.transformer)";
  unsigned layers = layersAttr.getInt();
  std::vector<PipelineUnit> units(layers + 2);
  units[0].name = "embedding";
  for (unsigned i = 0; i < layers; ++i)
    units[i + 1].name = "layer " + std::to_string(i);
  units[layers + 1].name = "head";

  for (ParamOp param : module.getOps<ParamOp>())
    if (param.getKind() == ParamKind::weight)
      if (auto unit = pipelineUnitOfName(param.getSymName(), layers))
        units[*unit].weightBytes += tensorBytes(param.getType());
  step.walk([&](Operation *op) {
    // Forward ops carry the VJP interface; what they produce is kept for
    // the backward pass.
    if (!isa<DifferentiableOpInterface>(op))
      return;
    std::optional<unsigned> unit = pipelineUnitOf(op->getLoc(), layers);
    if (!unit)
      return;
    units[*unit].flops += 3.0 * modelFlops(op);
    for (Value result : op->getResults())
      units[*unit].activationBytes += tensorBytes(result.getType());
  });
  return units;
}

FailureOr<PipelinePlan> mlir::moe::planPipeline(Operation *diagnosticsOn,
                                                std::vector<PipelineUnit> units,
                                                unsigned stages,
                                                unsigned virtualStages) {
  unsigned chunks = stages * virtualStages, n = units.size();
  if (stages == 0 || virtualStages == 0)
    return diagnosticsOn->emitError()
           << "expected at least one pipeline stage and virtual stage";
  if (chunks > n)
    return diagnosticsOn->emitError()
           << "cannot cut " << n << " units (embedding, layers, head) into "
           << chunks << " pipeline chunks (" << stages << " stages x "
           << virtualStages << " virtual stages)";
  auto memoryOf = [](const PipelineUnit &u) {
    // Weights, their gradients and two AdamW moments, plus activations.
    return 4 * u.weightBytes + u.activationBytes;
  };
  // Prefix sums make any chunk's cost O(1).
  std::vector<double> flops(n + 1, 0);
  std::vector<uint64_t> memory(n + 1, 0);
  for (unsigned i = 0; i < n; ++i) {
    flops[i + 1] = flops[i] + units[i].flops;
    memory[i + 1] = memory[i] + memoryOf(units[i]);
  }
  using Cost = std::pair<double, uint64_t>; // (max flops, max memory)
  const Cost infinite = {std::numeric_limits<double>::infinity(), 0};
  // best[j][i]: the best cut of the first i units into j chunks.
  std::vector<std::vector<Cost>> best(chunks + 1,
                                      std::vector<Cost>(n + 1, infinite));
  std::vector<std::vector<unsigned>> from(chunks + 1,
                                          std::vector<unsigned>(n + 1, 0));
  best[0][0] = {0, 0};
  for (unsigned j = 1; j <= chunks; ++j)
    for (unsigned i = j; i <= n; ++i)
      for (unsigned k = j - 1; k < i; ++k) {
        if (best[j - 1][k] == infinite)
          continue;
        Cost chunk = {flops[i] - flops[k], memory[i] - memory[k]};
        Cost cost = {std::max(best[j - 1][k].first, chunk.first),
                     std::max(best[j - 1][k].second, chunk.second)};
        if (cost < best[j][i]) {
          best[j][i] = cost;
          from[j][i] = k;
        }
      }

  PipelinePlan plan;
  plan.units = std::move(units);
  plan.stages = stages;
  plan.virtualStages = virtualStages;
  plan.chunks.resize(chunks);
  for (unsigned j = chunks, i = n; j > 0; --j) {
    unsigned k = from[j][i];
    PipelineChunk &chunk = plan.chunks[j - 1];
    chunk.firstUnit = k;
    chunk.lastUnit = i - 1;
    // Interleaved 1F1B: rank s holds chunks s, s + stages, ...
    chunk.stage = (j - 1) % stages;
    chunk.chunk = (j - 1) / stages;
    chunk.flops = flops[i] - flops[k];
    chunk.memoryBytes = memory[i] - memory[k];
    i = k;
  }
  return plan;
}

void mlir::moe::printPipelineReport(const PipelinePlan &plan,
                                    llvm::raw_ostream &os) {
  os << "pipeline: " << plan.stages << " stages x " << plan.virtualStages
     << " virtual (" << plan.chunks.size() << " chunks) over "
     << plan.units.size() << " units\n";
  std::vector<double> stageFlops(plan.stages, 0);
  std::vector<uint64_t> stageMemory(plan.stages, 0);
  for (const PipelineChunk &chunk : plan.chunks) {
    os << llvm::format("  stage %u chunk %u: %-10s .. %-10s %10.3g FLOP %10.3f "
                       "MiB\n",
                       chunk.stage, chunk.chunk,
                       plan.units[chunk.firstUnit].name.c_str(),
                       plan.units[chunk.lastUnit].name.c_str(), chunk.flops,
                       chunk.memoryBytes / 1048576.0);
    stageFlops[chunk.stage] += chunk.flops;
    stageMemory[chunk.stage] += chunk.memoryBytes;
  }
  double most = 0, total = 0;
  for (unsigned s = 0; s < plan.stages; ++s) {
    os << llvm::format("  stage %u total: %10.3g FLOP %10.3f MiB\n", s,
                       stageFlops[s], stageMemory[s] / 1048576.0);
    most = std::max(most, stageFlops[s]);
    total += stageFlops[s];
  }
  double mean = total / plan.stages;
  os << llvm::format("  compute imbalance (slowest / mean stage): %.3fx\n",
                     mean > 0 ? most / mean : 1.0);
}
