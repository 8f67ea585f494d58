//===- ModelStatistics.cpp - sizes, FLOPs and memory of a step ------------===//
#include "moe/Target/ModelStatistics.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/PrecisionRecipe.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/JSON.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;

static int64_t intEntry(DictionaryAttr dict, StringRef key) {
  if (!dict)
    return 0;
  auto attr = dict.getAs<IntegerAttr>(key);
  return attr ? attr.getInt() : 0;
}

/// Matmul FLOPs of the forward ops (multiply-add = 2 FLOPs).
/// Model FLOPs of the forward pass, without what is recomputed for the
/// backward pass.
static double forwardFlops(func::FuncOp step) {
  double flops = 0;
  step.walk([&](Operation *op) {
    if (!op->hasAttr(kRecomputedAttrName))
      flops += modelFlops(op);
  });
  return flops;
}

/// A step split into pipeline stages holds each parameter, its moments and
/// an amax history on the rank of the stage updating it, and an arena slot
/// (with its tokens and targets) per microbatch in flight: the bytes per
/// rank are those of the busiest rank, and the stages multiply the ranks.
/// Needs the arena and input bytes.
static void accountPipelineRanks(ModuleOp module, func::FuncOp step,
                                 ModelStatistics &stats) {
  SmallVector<PipelineRankMemory> ranks = pipelineRankMemory(module, step);
  if (ranks.empty())
    return;
  // A working copy lives on the rank of the stage whose AdamW update
  // rounds its master into it.
  SmallVector<uint64_t> copies(ranks.size(), 0);
  SymbolTable symbols(module);
  step.walk([&](AdamWUpdateOp update) {
    auto stage = update->getAttrOfType<IntegerAttr>(kPipelineStageAttrName);
    FlatSymbolRefAttr copy = update.getWorkingCopyAttr();
    if (!stage || stage.getInt() < 0 || !copy)
      return;
    if (auto param = symbols.lookup<ParamOp>(copy.getAttr()))
      copies[stage.getInt() % ranks.size()] = llvm::SaturatingAdd(
          copies[stage.getInt() % ranks.size()],
          tensorBytes(param.getTensorType()));
  });
  uint64_t slot = stats.arenaBytes + stats.inputBytes;
  auto held = [&](const PipelineRankMemory &rank) {
    return rank.persistentBytes() + rank.slots * slot +
           copies[&rank - ranks.data()] + rank.workspaceBytes;
  };
  const PipelineRankMemory *busiest = &ranks.front();
  for (const PipelineRankMemory &rank : ranks)
    if (held(rank) > held(*busiest))
      busiest = &rank;
  stats.workingCopyBytes = copies[busiest - ranks.data()];
  stats.paramBytes = busiest->paramBytes;
  stats.optimizerStateBytes = busiest->optimizerStateBytes;
  stats.fp8HistoryBytes = busiest->fp8HistoryBytes;
  stats.gradientSumBytes = busiest->gradientSumBytes;
  stats.workspaceBytes = busiest->workspaceBytes;
  stats.pipelineSlots = busiest->slots;
  stats.ranks *= ranks.size();
}

static std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

/// The dtypes of the step: the recorded precision, the bytes per
/// parameter of its AdamW updates, the kept activations (forward values
/// the backward reads, as savedActivationBytes counts them) and the
/// collectives' messages, by element type.
static void accountDtypes(ModuleOp module, func::FuncOp step,
                          ModelStatistics &stats) {
  std::string error;
  FailureOr<PrecisionRecipe> recipe = readPrecision(module, error);
  if (succeeded(recipe))
    stats.precision = *recipe;
  SymbolTable symbols(module);
  auto elementOf = [&](FlatSymbolRefAttr ref) -> uint64_t {
    auto param = ref ? symbols.lookup<ParamOp>(ref.getAttr()) : ParamOp();
    return param ? elementBytes(param.getTensorType().getElementType()) : 0;
  };
  step.walk([&](AdamWUpdateOp update) {
    if (stats.masterElementBytes > 0)
      return;
    stats.masterElementBytes = elementOf(update.getParamAttr());
    stats.momentElementBytes = elementOf(update.getExpAvgAttr()) +
                               elementOf(update.getExpAvgSqAttr());
    stats.gradientElementBytes =
        elementBytes(update.getGrad().getType().getElementType());
    stats.workingCopyElementBytes = elementOf(update.getWorkingCopyAttr());
  });
  llvm::SetVector<Operation *> forward = forwardOps(step);
  for (Operation *op : forward)
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) {
            return !forward.contains(user) && !isa<func::ReturnOp>(user);
          }))
        stats.keptActivationBytesByType[typeName(
            cast<ShapedType>(result.getType()).getElementType())] +=
            tensorBytes(result.getType());
  step.walk([&](Operation *op) {
    Value moved;
    if (auto reduce = dyn_cast<AllReduceOp>(op))
      moved = reduce.getInput();
    else if (auto gather = dyn_cast<AllGatherOp>(op))
      moved = gather.getResult();
    else if (auto scatter = dyn_cast<ReduceScatterOp>(op))
      moved = scatter.getInput();
    else if (isa<ExpertsOp, ExpertsGradOp>(op) &&
             op->getAttrOfType<ArrayAttr>("expert_axes"))
      moved = op->getOperand(isa<ExpertsOp>(op) ? 0 : 1);
    if (auto bucket = dyn_cast<ReduceBucketOp>(op))
      for (Value input : bucket.getInputs())
        stats.messageBytesByType[typeName(
            cast<ShapedType>(input.getType()).getElementType())] +=
            tensorBytes(input.getType());
    if (moved)
      stats.messageBytesByType[typeName(
          cast<ShapedType>(moved.getType()).getElementType())] +=
          tensorBytes(moved.getType());
  });
}

ModelStatistics mlir::moe::computeModelStatistics(ModuleOp module,
                                                  func::FuncOp step) {
  ModelStatistics stats;
  auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName);
  if (model)
    if (auto name = model.getAs<StringAttr>("name"))
      stats.name = name.str();
  stats.vocab = intEntry(model, "vocab");
  stats.hidden = intEntry(model, "hidden");
  stats.layers = intEntry(model, "layers");
  stats.heads = intEntry(model, "heads");
  stats.kvHeads = intEntry(model, "kv_heads");
  stats.experts = intEntry(model, "experts");
  stats.topK = intEntry(model, "top_k");
  stats.ffn = intEntry(model, "ffn");
  if (step.getNumArguments() > 0) {
    auto tokens = cast<ShapedType>(step.getArgumentTypes()[0]);
    if (tokens.getRank() == 2) {
      stats.batch = tokens.getDimSize(0);
      stats.seq = tokens.getDimSize(1);
    }
    for (Type type : step.getArgumentTypes())
      stats.inputBytes += tensorBytes(type);
  }

  // After partitioning, parameter types are this rank's blocks: counts of
  // the model scale them back up, bytes stay per rank.
  MeshOp mesh = getMesh(module);
  bool partitioned = module->hasAttr(kPartitionedAttrName);
  if (mesh)
    stats.ranks = mesh.getNumRanks();
  // Sums saturate instead of wrapping: the verifier bounds each tensor at
  // 2^48 elements and a moe.transformer at 2^48 parameters, but a
  // hand-written module may declare any number of tensors.
  auto add = [](uint64_t &sum, uint64_t value) {
    sum = llvm::SaturatingAdd(sum, value);
  };
  uint64_t totalParams = 0, activeParams = 0;
  for (ParamOp param : module.getOps<ParamOp>()) {
    RankedTensorType type = param.getTensorType();
    uint64_t localBytes = tensorBytes(type);
    SmallVector<uint64_t> global(type.getShape());
    if (partitioned && param.getSharding())
      for (unsigned d = 0; d < global.size(); ++d)
        for (StringRef axis : param.getSharding()->axesOf(d))
          global[d] = llvm::SaturatingMultiply<uint64_t>(
              global[d], mesh.getAxisSize(axis).value_or(1));
    uint64_t elements = 1;
    for (uint64_t size : global)
      elements = llvm::SaturatingMultiply(elements, size);
    // A router's bias and load counter are persistent state the step
    // updates, not trained weights: they are counted with the moments.
    if (param.getKind() == ParamKind::optimizer_state ||
        param.getKind() == ParamKind::router_bias ||
        param.getKind() == ParamKind::expert_load) {
      add(stats.optimizerStateBytes, localBytes);
      continue;
    }
    if (param.getKind() == ParamKind::fp8_history) {
      add(stats.fp8HistoryBytes, localBytes);
      continue;
    }
    // A working copy is its master's elements again, in BF16.
    if (param.getKind() == ParamKind::working_copy) {
      add(stats.workingCopyBytes, localBytes);
      continue;
    }
    add(stats.paramBytes, localBytes);
    add(totalParams, elements);
    // A token uses top_k of the experts stacked along dimension 0.
    bool stacked = param.getSymName().contains("{e}");
    add(activeParams,
        stacked && stats.topK > 0 && global[0] > 0
            ? elements / global[0] *
                  std::min<uint64_t>(stats.topK, global[0])
            : elements);
  }
  auto asCount = [](uint64_t count) {
    return static_cast<int64_t>(
        std::min<uint64_t>(count, std::numeric_limits<int64_t>::max()));
  };
  stats.totalParams = asCount(totalParams);
  stats.activeParams = asCount(activeParams);
  stats.flopsPerStep = 3.0 * forwardFlops(step);
  if (auto arena = step->getAttrOfType<IntegerAttr>(kArenaBytesAttrName))
    stats.arenaBytes = arena.getInt();
  stats.workspaceBytes = kernelWorkspaceBytes(module, step);
  accountPipelineRanks(module, step, stats);
  if (auto peak = step->getAttrOfType<IntegerAttr>(kPeakLiveBytesAttrName))
    stats.peakLiveBytes = peak.getInt();
  step.walk([&](AdamWUpdateOp update) {
    add(stats.gradientBytes, tensorBytes(update.getGrad().getType()));
  });
  stats.keptActivationBytes = savedActivationBytes(step);
  step.walk([&](ExpertsOp experts) {
    if (Value hidden = experts.getHidden())
      add(stats.savedExpertBytes, tensorBytes(hidden.getType()));
  });
  accountDtypes(module, step, stats);
  step.walk([&](Operation *op) {
    stats.recomputedOps += op->hasAttr(kRecomputedAttrName);
  });
  if (auto budget = step->getAttrOfType<IntegerAttr>(kMemoryBudgetAttrName))
    stats.memoryBudget = budget.getInt();
  if (auto flops = step->getAttrOfType<FloatAttr>(kRecomputeFlopsAttrName))
    stats.recomputeFlops = flops.getValueAsDouble();
  if (auto flops = step->getAttrOfType<FloatAttr>(kFullRecomputeFlopsAttrName))
    stats.fullRecomputeFlops = flops.getValueAsDouble();
  return stats;
}

std::string mlir::moe::configJson(ModuleOp module, func::FuncOp step) {
  llvm::json::Object config;
  if (auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName)) {
    for (NamedAttribute entry : model) {
      Attribute value = entry.getValue();
      // BoolAttr is an i1 IntegerAttr, whose getInt() would give -1.
      if (auto b = dyn_cast<BoolAttr>(value))
        config[entry.getName().strref()] = b.getValue();
      else if (auto i = dyn_cast<IntegerAttr>(value))
        config[entry.getName().strref()] = i.getInt();
      else if (auto f = dyn_cast<FloatAttr>(value))
        config[entry.getName().strref()] = f.getValueAsDouble();
      else if (auto s = dyn_cast<StringAttr>(value))
        config[entry.getName().strref()] = s.str();
      else if (auto a = dyn_cast<DenseI64ArrayAttr>(value))
        config[entry.getName().strref()] =
            llvm::json::Array(a.asArrayRef());
    }
  }
  llvm::json::Object optimizer;
  step.walk([&](Operation *op) {
    if (auto lr = dyn_cast<LearningRateOp>(op)) {
      optimizer["lr_peak"] = lr.getPeak().convertToDouble();
      optimizer["lr_min"] = lr.getMin().convertToDouble();
      optimizer["warmup"] = static_cast<int64_t>(lr.getWarmup());
      optimizer["decay"] = static_cast<int64_t>(lr.getDecaySteps());
    } else if (auto clip = dyn_cast<ClipCoefficientOp>(op)) {
      optimizer["max_grad_norm"] = clip.getMaxNorm().convertToDouble();
    } else if (auto update = dyn_cast<AdamWUpdateOp>(op)) {
      optimizer["beta1"] = update.getBeta1().convertToDouble();
      optimizer["beta2"] = update.getBeta2().convertToDouble();
      optimizer["eps"] = update.getEps().convertToDouble();
      // Norms are not decayed; report the rate of the decayed weights.
      double decay = update.getWeightDecay().convertToDouble();
      if (decay > 0 || !optimizer.get("weight_decay"))
        optimizer["weight_decay"] = decay;
    }
  });
  config["optimizer"] = std::move(optimizer);
  // The recipe of a mixed-precision step, for tools reading the config
  // (the step dump's checker); fp32 configs stay as they were.
  std::string error;
  if (FailureOr<PrecisionRecipe> recipe = readPrecision(module, error);
      succeeded(recipe) && recipe->isMixed())
    config["precision"] = llvm::json::Object{
        {"compute", precisionName(recipe->compute).str()},
        {"grad_reduce", precisionName(recipe->gradReduce).str()}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(config));
  return text;
}

static void printBytesRow(llvm::raw_ostream &os, StringRef what,
                          uint64_t bytes) {
  os << llvm::format("  %-34s %14.2f MiB\n", what.str().c_str(),
                     bytes / (1024.0 * 1024.0));
}

void mlir::moe::printMemoryReport(const ModelStatistics &stats,
                                  llvm::raw_ostream &os) {
  os << "memory per rank (" << stats.ranks
     << (stats.ranks == 1 ? " rank" : " ranks") << ", "
     << stats.precision.describe() << ")\n";
  os << llvm::format("  parameters: %lld total, %lld active per token\n",
                     static_cast<long long>(stats.totalParams),
                     static_cast<long long>(stats.activeParams));
  printBytesRow(os, "parameters", stats.paramBytes);
  printBytesRow(os, "optimizer state (AdamW m, v)",
                stats.optimizerStateBytes);
  bool mixed = stats.precision.isMixed() || stats.workingCopyBytes > 0;
  if (mixed) {
    printBytesRow(os, "working copies (what GEMMs read)",
                  stats.workingCopyBytes);
    os << llvm::format("  bytes per parameter: %llu master, %llu moments, "
                       "%llu working copy, %llu gradient (%llu)\n",
                       (unsigned long long)stats.masterElementBytes,
                       (unsigned long long)stats.momentElementBytes,
                       (unsigned long long)stats.workingCopyElementBytes,
                       (unsigned long long)stats.gradientElementBytes,
                       (unsigned long long)(stats.masterElementBytes +
                                            stats.momentElementBytes +
                                            stats.workingCopyElementBytes +
                                            stats.gradientElementBytes));
  }
  if (stats.fp8HistoryBytes > 0)
    printBytesRow(os, "fp8 amax histories", stats.fp8HistoryBytes);
  if (stats.pipelineSlots > 0)
    printBytesRow(os, "gradients summed over microbatches",
                  stats.gradientSumBytes);
  printBytesRow(os, "step inputs (tokens, targets, step)", stats.inputBytes);
  printBytesRow(os, "arena: activations and gradients", stats.arenaBytes);
  printBytesRow(os, "  of which live at the peak", stats.peakLiveBytes);
  printBytesRow(os, "  gradients", stats.gradientBytes);
  printBytesRow(os, "  activations kept for backward",
                stats.keptActivationBytes);
  if (stats.savedExpertBytes > 0)
    printBytesRow(os, "    of which experts' w1 x, w3 x",
                  stats.savedExpertBytes);
  if (mixed) {
    // The element types of the compiled step, not the recipe's promise.
    auto byType = [&](StringRef what,
                      const std::map<std::string, uint64_t> &bytes) {
      os << "    " << what << " by dtype:";
      if (bytes.empty())
        os << " none";
      for (const auto &[type, count] : bytes)
        os << llvm::format(" %s %.2f MiB;", type.c_str(),
                           count / (1024.0 * 1024.0));
      os << "\n";
    };
    byType("kept activations", stats.keptActivationBytesByType);
    byType("messages (collectives per step)", stats.messageBytesByType);
    os << llvm::format("  activations and messages: %u bytes per element "
                       "(%s)\n",
                       stats.precision.activationBytes(),
                       precisionName(stats.precision.compute).str().c_str());
  }
  if (stats.pipelineSlots > 0)
    os << llvm::format("  microbatches in flight: %lld, each with its "
                       "inputs and arena\n",
                       static_cast<long long>(stats.pipelineSlots));
  printBytesRow(os, "kernel workspace", stats.workspaceBytes);
  printBytesRow(os, "total (peak)", stats.peakBytes());
  if (stats.memoryBudget > 0) {
    printBytesRow(os, "budget", stats.memoryBudget);
    os << llvm::format("  recomputed in backward: %u ops, %.4g FLOP (full "
                       "recomputation: %.4g)\n",
                       stats.recomputedOps, stats.recomputeFlops,
                       stats.fullRecomputeFlops);
  }
  os << llvm::format("  model FLOPs per step: %.4g (%.4g per token)\n",
                     stats.flopsPerStep,
                     stats.batch * stats.seq > 0
                         ? stats.flopsPerStep / (stats.batch * stats.seq)
                         : 0.0);
}

uint64_t ModelStatistics::peakBytes() const {
  uint64_t slots = std::max<int64_t>(1, pipelineSlots);
  uint64_t perSlot = llvm::SaturatingMultiply(
      slots, llvm::SaturatingAdd(inputBytes, arenaBytes));
  return llvm::SaturatingAdd(paramBytes, optimizerStateBytes, fp8HistoryBytes,
                             gradientSumBytes, perSlot, workspaceBytes,
                             workingCopyBytes);
}
