//===- CostModel.cpp - predicted step time on a cluster -------------------===//
#include "moe/Target/CostModel.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Target/Collectives.h"
#include "moe/Target/KernelCost.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Target.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

/// FLOPs an op executes (a multiply-add is 2), forward and backward.
double executedFlops(Operation *op) {
  if (double forward = modelFlops(op); forward > 0)
    return forward;
  if (auto grad = dyn_cast<LinearGradInputOp>(op)) {
    auto w = grad.getWeight().getType().getShape();
    return 2.0 * grad.getGrad().getType().getNumElements() * w[1];
  }
  if (auto grad = dyn_cast<LinearGradWeightOp>(op)) {
    auto dy = grad.getGrad().getType();
    double rows = dy.getNumElements() / dy.getShape().back();
    return 2.0 * rows * dy.getShape().back() *
           grad.getInput().getType().getShape().back();
  }
  // The logits again, then the input's and the weight's gradients.
  if (auto grad = dyn_cast<LinearCrossEntropyGradOp>(op))
    return 3.0 * linearFlops(grad.getInput(), grad.getWeight());
  if (auto grad = dyn_cast<AttentionGradOp>(op)) {
    auto q = grad.getQuery().getType().getShape();
    double b = q[0], width = q[2];
    // Recomputed scores, dP, dV, dQ and dK over the causal triangle.
    return 5.0 * 2.0 * b * width *
           causalScoreEntries(q[1], attendedKeys(op, grad.getKey(),
                                                 grad.getSequenceAxes(),
                                                 grad.getRing()));
  }
  if (auto grad = dyn_cast<ExpertsGradOp>(op)) {
    auto w1 = grad.getW1().getType().getShape();
    double assignments = grad.getWeights().getType().getNumElements();
    // W1 x and W3 x again (unless saved: `hidden`), dy W2, dW2, dx (two)
    // and dW1, dW3.
    double gemms = grad.getHidden() ? 6.0 : 8.0;
    return 2.0 * assignments * gemms * w1[1] * w1[2];
  }
  return 0;
}

/// The FP8 recipe `op`'s GEMMs read, if any.
std::optional<Fp8Scaling> fp8RecipeOf(Operation *op) {
  if (auto experts = dyn_cast<ExpertsOp>(op))
    return experts.getFp8();
  if (auto grad = dyn_cast<ExpertsGradOp>(op))
    return grad.getFp8();
  return std::nullopt;
}

/// Whether `op`'s GEMMs run at the FP8 rate: an FP8 recipe the backend of
/// the GPU's target runs (its capability record); otherwise they are costed
/// in BF16, as on a GPU without FP8 tensor cores.
bool readsFp8(Operation *op, const Target *target) {
  std::optional<Fp8Scaling> recipe = fp8RecipeOf(op);
  return recipe && target && target->hasFp8Recipe(stringifyFp8Scaling(*recipe));
}

/// The GEMMs an op runs, by shape, or none where its FLOPs are not priced
/// by shape (attention is priced by its kernel, other ops by FLOPs). A
/// gradient op runs its forward GEMM's gradient shapes (GemmShape).
SmallVector<GemmShape> gemmShapesOf(Operation *op) {
  auto dims = [](Value v) { return cast<ShapedType>(v.getType()).getShape(); };
  // A linear's forward, its weight [n, k]: rows x k in, rows x n out.
  auto linear = [&](Value input, Value weight) {
    double n = dims(weight)[0], k = dims(weight)[1];
    double rows = cast<ShapedType>(input.getType()).getNumElements() / k;
    return GemmShape{rows, n, k};
  };
  if (auto forward = dyn_cast<LinearOp>(op))
    return {linear(forward.getInput(), forward.getWeight())};
  if (auto loss = dyn_cast<LinearCrossEntropyOp>(op))
    return {linear(loss.getInput(), loss.getWeight())};
  if (auto grad = dyn_cast<LinearGradInputOp>(op)) {
    // The output's gradient is rows x n.
    double n = dims(grad.getWeight())[0], k = dims(grad.getWeight())[1];
    double rows =
        cast<ShapedType>(grad.getGrad().getType()).getNumElements() / n;
    return {GemmShape{rows, n, k}.inputGradient()};
  }
  if (auto grad = dyn_cast<LinearGradWeightOp>(op)) {
    // The forward's rows and widths from the two activations.
    double n = dims(grad.getGrad()).back(), k = dims(grad.getInput()).back();
    double rows =
        cast<ShapedType>(grad.getGrad().getType()).getNumElements() / n;
    return {GemmShape{rows, n, k}.weightGradient()};
  }
  // The logits again, then the input's and the weight's gradients.
  if (auto grad = dyn_cast<LinearCrossEntropyGradOp>(op)) {
    GemmShape logits = linear(grad.getInput(), grad.getWeight());
    return {logits, logits.inputGradient(), logits.weightGradient()};
  }
  // Grouped over the rank's experts, each with its share of the rows: the
  // up projections (W1, W3: rows x h to rows x f) and the down one (W2).
  auto experts = [&](Value w1, Value weights) {
    double e = dims(w1)[0], f = dims(w1)[1], h = dims(w1)[2];
    double rows = cast<ShapedType>(weights.getType()).getNumElements() / e;
    return std::make_pair(GemmShape{rows, f, h, e}, GemmShape{rows, h, f, e});
  };
  if (auto forward = dyn_cast<ExpertsOp>(op)) {
    auto [up, down] = experts(forward.getW1(), forward.getWeights());
    return {up, up, down};
  }
  if (auto grad = dyn_cast<ExpertsGradOp>(op)) {
    auto [up, down] = experts(grad.getW1(), grad.getWeights());
    // dy W2 and dW2, dx through both up projections, dW1 and dW3; W1 x and
    // W3 x again unless saved.
    SmallVector<GemmShape> shapes = {
        down.inputGradient(), down.weightGradient(), up.inputGradient(),
        up.inputGradient(),   up.weightGradient(),   up.weightGradient()};
    if (!grad.getHidden())
      shapes.append({up, up});
    return shapes;
  }
  return {};
}

/// Bytes per element of an op's GEMM operands: its first operand's.
double elementBytesOf(Operation *op) {
  for (Value v : op->getOperands())
    if (auto shaped = dyn_cast<ShapedType>(v.getType()))
      return std::max<double>(1, shaped.getElementTypeBitWidth() / 8);
  return 4;
}

/// The seconds of `flops` of `op`'s GEMMs: by their shapes (KernelCost.h)
/// where the op has them, attention's in moe-run's kernel at its
/// efficiency, the rest at the GPU's GEMM rate. FP8 where they read FP8,
/// except the share of a blockwise backward that the target's block
/// scaling runs in BF16 (Capabilities::blockwiseBackwardFp8Share).
double opGemmSeconds(Operation *op, double flops, const GpuSpec &gpu,
                     const Target *target) {
  if (isa<AttentionOp>(op))
    return attentionSeconds(gpu, "moe-run", flops, /*backward=*/false);
  if (isa<AttentionGradOp>(op))
    return attentionSeconds(gpu, "moe-run", flops, /*backward=*/true);
  SmallVector<GemmShape> shapes = gemmShapesOf(op);
  auto atRate = [&](bool fp8) {
    if (shapes.empty())
      return flops / gpu.gemmFlops(fp8);
    double seconds = 0;
    for (const GemmShape &shape : shapes)
      seconds += mlir::moe::gemmSeconds(gpu, shape, fp8,
                                        fp8 ? 1.0 : elementBytesOf(op));
    return seconds;
  };
  if (!readsFp8(op, target))
    return atRate(false);
  double share = 1.0;
  if (auto grad = dyn_cast<ExpertsGradOp>(op);
      grad && *fp8RecipeOf(op) == Fp8Scaling::blockwise)
    share = target->capabilities.blockwiseBackwardFp8Share(
        static_cast<bool>(grad.getHidden()));
  return share * atRate(true) + (1.0 - share) * atRate(false);
}

double bytesOf(Operation *op) {
  double bytes = 0;
  for (Value v : op->getOperands())
    if (isa<ShapedType>(v.getType()))
      bytes += tensorBytes(v.getType());
  for (Value v : op->getResults())
    if (isa<ShapedType>(v.getType()))
      bytes += tensorBytes(v.getType());
  return bytes;
}

/// The group of the mesh over `axes` that holds rank 0 (ranks numbered
/// row-major, the last axis fastest): its size, and how many of its ranks
/// share rank 0's node.
CollectiveGroup groupOf(MeshOp mesh, ArrayAttr axes, int64_t gpusPerNode) {
  CollectiveGroup group;
  if (!mesh || !axes)
    return group;
  SmallVector<StringRef> names(mesh.getAxes().getAsValueRange<StringAttr>());
  ArrayRef<int64_t> shape = mesh.getShape();
  // The ranks of the group: every combination of coordinates on `axes`.
  std::vector<int64_t> members = {0};
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(names.size()) - 1; i >= 0; --i) {
    if (llvm::is_contained(axes.getAsValueRange<StringAttr>(), names[i])) {
      std::vector<int64_t> grown;
      for (int64_t coordinate = 0; coordinate < shape[i]; ++coordinate)
        for (int64_t member : members)
          grown.push_back(member + coordinate * stride);
      members = std::move(grown);
    }
    stride *= shape[i];
  }
  group.size = static_cast<int64_t>(members.size());
  group.perNode = std::max<int64_t>(
      1, llvm::count_if(members, [&](int64_t r) { return r < gpusPerNode; }));
  return group;
}

} // namespace

double StepCost::commTotal() const {
  double sum = 0;
  for (const auto &[kind, seconds] : commSeconds)
    sum += seconds;
  return sum;
}

double StepCost::exposedComm() const {
  // Gradient reductions run on the communication stream while the rest of
  // the backward pass computes (as moe-run's --device cuda does); what
  // does not fit behind the backward's compute shows.
  double hidden = std::min(gradientReductionSeconds, backwardSeconds);
  return commTotal() - hidden - ringHiddenSeconds;
}

double StepCost::total() const {
  // The pipeline's makespan holds every pass's compute and communication;
  // the optimizer phase and the unhidden reductions follow it.
  return gemmSeconds + memorySeconds + exposedComm() + bubbleSeconds;
}

/// Whether only the optimizer reads `value` (a gradient's reduction, which
/// can run while the rest of the backward pass computes).
static bool onlyOptimizerReads(Value value) {
  return !value.use_empty() &&
         llvm::all_of(value.getUsers(), [](Operation *user) {
           return isa<AdamWUpdateOp, GlobalNormOp>(user);
         });
}

namespace {
/// What one op costs and where it runs: its seconds per microbatch (or per
/// step, in the optimizer phase), and on which pipeline ranks.
struct OpCost {
  std::string kind; // "gemm", "memory" or a collective's kind
  double seconds = 0;
  bool gradientReduction = false;
  /// Of `seconds`, what the op's own compute hides (ring attention).
  double hidden = 0;
};

/// The pipeline phase of an op (forward without a split).
::moe::pipeline::Phase phaseOf(Operation *op,
                               const llvm::SetVector<Operation *> &forward) {
  namespace pp = ::moe::pipeline;
  if (auto phase = op->getAttrOfType<StringAttr>(kPipelinePhaseAttrName)) {
    return llvm::StringSwitch<pp::Phase>(phase.getValue())
        .Case("backward", pp::Phase::Backward)
        .Case("weight", pp::Phase::BackwardWeight)
        .Case("optimizer", pp::Phase::Optimizer)
        .Default(pp::Phase::Forward);
  }
  if (isa<AdamWUpdateOp, GlobalNormOp>(op))
    return pp::Phase::Optimizer;
  return forward.contains(op) ? pp::Phase::Forward : pp::Phase::Backward;
}
} // namespace

StepCost mlir::moe::estimateStepCost(ModuleOp module, func::FuncOp step,
                                     const ClusterSpec &cluster,
                                     const ::moe::pipeline::Schedule *schedule) {
  namespace pp = ::moe::pipeline;
  StepCost cost;
  llvm::SetVector<Operation *> forward = forwardOps(step);
  ModelStatistics stats = computeModelStatistics(module, step);
  int64_t ranks = 1, microbatches = 1;
  if (auto attr = step->getAttrOfType<IntegerAttr>(kPipelineRanksAttrName))
    ranks = std::max<int64_t>(1, attr.getInt());
  if (auto attr = module->getAttrOfType<IntegerAttr>(kMicrobatchesAttrName))
    microbatches = std::max<int64_t>(1, attr.getInt());
  cost.pipelineRanks = ranks;
  cost.microbatches = microbatches;
  // The statistics are of one microbatch over all stages.
  cost.modelFlops = stats.flopsPerStep * microbatches / ranks;
  cost.ranks = stats.ranks;
  cost.tokens = stats.batch * stats.seq * microbatches;
  cost.peakMemoryBytes = static_cast<double>(stats.peakBytes());
  MeshOp mesh = getMesh(module);
  const GpuSpec &gpu = cluster.gpu;
  const ::moe::caps::Capabilities *record = capabilitiesOf(gpu);
  const Target *target = record ? lookupTarget(std::string(record->target))
                                : nullptr;

  // Per pipeline rank: per-microbatch seconds of each phase, and the once
  // per step optimizer; the breakdown by kind (per step).
  struct RankCost {
    double phase[4] = {0, 0, 0, 0};
    /// Per microbatch: the backward's compute, which hides reductions.
    double backwardCompute = 0;
    std::map<std::string, double> byKind;
    double gradientReduction = 0, ringHidden = 0;
  };
  std::vector<RankCost> perRank(ranks);
  auto account = [&](Operation *op, const OpCost &c) {
    pp::Phase phase = phaseOf(op, forward);
    std::optional<int64_t> runsOn = pipelineRankRunning(op, ranks);
    double times = phase == pp::Phase::Optimizer ? 1.0 : microbatches;
    for (int64_t r = 0; r < ranks; ++r) {
      if (runsOn && *runsOn != r)
        continue;
      RankCost &rank = perRank[r];
      rank.phase[static_cast<int>(phase)] += c.seconds;
      if ((phase == pp::Phase::Backward || phase == pp::Phase::BackwardWeight) &&
          (c.kind == "gemm" || c.kind == "memory"))
        rank.backwardCompute += c.seconds;
      rank.byKind[c.kind] += c.seconds * times;
      if (c.gradientReduction)
        rank.gradientReduction += c.seconds * times;
      rank.ringHidden += c.hidden * times;
    }
  };

  step.walk([&](Operation *op) {
    using CollectiveSeconds = double (*)(const ClusterSpec &, CollectiveGroup,
                                         double);
    auto collective = [&](const char *kind, ArrayAttr axes, double bytes,
                          CollectiveSeconds seconds) {
      CollectiveGroup group = groupOf(mesh, axes, cluster.gpusPerNode);
      if (group.size <= 1)
        return;
      OpCost c;
      c.kind = kind;
      c.seconds = seconds(cluster, group, bytes);
      c.gradientReduction = op->getNumResults() >= 1 &&
                            llvm::all_of(op->getResults(), onlyOptimizerReads);
      account(op, c);
    };
    if (auto reduce = dyn_cast<AllReduceOp>(op))
      return collective("all-reduce", reduce.getAxes(),
                        tensorBytes(reduce.getInput().getType()),
                        allReduceSeconds);
    // Context parallelism's are attention's keys and values (gathered) and
    // their gradients (reduce-scattered), reported as such.
    auto overCp = [](ArrayAttr axes) {
      return axes && !axes.empty() &&
             cast<StringAttr>(axes[0]).getValue() == kContextAxis;
    };
    if (auto gather = dyn_cast<AllGatherOp>(op))
      return collective(
          overCp(gather.getAxes()) ? "cp K/V all-gather" : "all-gather",
          gather.getAxes(), tensorBytes(gather.getResult().getType()),
          allGatherSeconds);
    if (auto scatter = dyn_cast<ReduceScatterOp>(op))
      return collective(overCp(scatter.getAxes()) ? "cp K/V reduce-scatter"
                                                  : "reduce-scatter",
                        scatter.getAxes(),
                        tensorBytes(scatter.getInput().getType()),
                        allGatherSeconds);
    // One call for the whole bucket: one latency.
    if (auto bucket = dyn_cast<ReduceBucketOp>(op)) {
      double bytes = 0;
      for (Value input : bucket.getInputs())
        bytes += tensorBytes(input.getType());
      if (bucket.getScatter())
        return collective("reduce-scatter", bucket.getAxes(), bytes,
                          allGatherSeconds);
      return collective("all-reduce", bucket.getAxes(), bytes,
                        allReduceSeconds);
    }
    OpCost c;
    if (double flops = executedFlops(op); flops > 0) {
      c.kind = "gemm";
      c.seconds = std::max(opGemmSeconds(op, flops, gpu, target),
                           bytesOf(op) / gpu.streamBytesPerSecond());
    } else if (!isa<func::ReturnOp, GetParamOp, ConstantOp>(op) &&
               op->getDialect() && op->getNumResults() + op->getNumOperands()) {
      c.kind = "memory";
      c.seconds = bytesOf(op) / gpu.streamBytesPerSecond();
    }
    if (c.seconds > 0)
      account(op, c);
    // ZeRO-1: the updated blocks gathered into the whole copy the forward
    // reads (the working copy under mixed precision), inside the optimizer.
    if (auto update = dyn_cast<AdamWUpdateOp>(op);
        update && update.getGatherAxes()) {
      CollectiveGroup group =
          groupOf(mesh, *update.getGatherAxes(), cluster.gpusPerNode);
      FlatSymbolRefAttr copy = update.getWorkingCopyAttr()
                                   ? update.getWorkingCopyAttr()
                                   : update.getParamAttr();
      auto param = module.lookupSymbol<ParamOp>(copy.getAttr());
      double whole = param ? tensorBytes(param.getTensorType()) : 0.0;
      if (group.size > 1) {
        OpCost moved;
        moved.kind = "zero-1 all-gather";
        moved.seconds = allGatherSeconds(cluster, group, whole);
        account(op, moved);
      }
    }
    // Ring attention: the whole sequence's key/value blocks pass every rank
    // (the backward's with their gradients' accumulators), each transfer
    // behind the attention of the block before.
    auto ring = [&](Value key, Value value, ArrayAttr axes, double passes) {
      CollectiveGroup group = groupOf(mesh, axes, cluster.gpusPerNode);
      if (group.size <= 1)
        return;
      double whole =
          (tensorBytes(key.getType()) + tensorBytes(value.getType())) *
          group.size;
      OpCost moved;
      moved.kind = "cp K/V ring";
      moved.seconds = passes * allGatherSeconds(cluster, group, whole);
      moved.hidden = std::min(moved.seconds, c.seconds);
      account(op, moved);
    };
    if (auto attention = dyn_cast<AttentionOp>(op);
        attention && attention.getRing())
      ring(attention.getKey(), attention.getValue(),
           *attention.getSequenceAxes(), 1.0);
    if (auto grad = dyn_cast<AttentionGradOp>(op); grad && grad.getRing())
      ring(grad.getKey(), grad.getValue(), *grad.getSequenceAxes(), 2.0);
    // Expert parallelism: each routed token's row goes to its expert's
    // rank and back (forward x out and y back; backward x, dy and the
    // weight out, dx and its weight gradient back).
    auto exchange = [&](std::optional<ArrayAttr> axes, Value x, Value weights,
                        double widths) {
      if (!axes)
        return;
      double rows = cast<ShapedType>(weights.getType()).getNumElements();
      auto rowType = cast<ShapedType>(x.getType());
      double width = rowType.getShape().back() *
                     double(elementBytes(rowType.getElementType()));
      collective("expert all-to-all", *axes, rows * width * widths,
                 allToAllSeconds);
    };
    if (auto experts = dyn_cast<ExpertsOp>(op))
      exchange(experts.getExpertAxes(), experts.getInput(),
               experts.getWeights(), 2.0);
    if (auto grad = dyn_cast<ExpertsGradOp>(op))
      exchange(grad.getExpertAxes(), grad.getInput(), grad.getWeights(), 3.0);
  });

  // The busiest pipeline rank sets the pace.
  auto busy = [&](const RankCost &r) {
    return microbatches * (r.phase[0] + r.phase[1] + r.phase[2]) + r.phase[3];
  };
  const RankCost &rank = *std::max_element(
      perRank.begin(), perRank.end(),
      [&](const RankCost &a, const RankCost &b) { return busy(a) < busy(b); });
  cost.busiestRank = &rank - perRank.data();
  for (const auto &[kind, seconds] : rank.byKind) {
    if (kind == "gemm")
      cost.gemmSeconds = seconds;
    else if (kind == "memory")
      cost.memorySeconds = seconds;
    else
      cost.commSeconds[kind] = seconds;
  }
  cost.gradientReductionSeconds = rank.gradientReduction;
  cost.ringHiddenSeconds = rank.ringHidden;
  // Gradient reductions overlap the backward of the step's last
  // microbatch (all of it without a pipeline), where the GPU's backend
  // overlaps them (async_collectives).
  cost.backwardSeconds =
      !record || record->asyncCollectives ? rank.backwardCompute : 0.0;
  double passes = microbatches * (rank.phase[0] + rank.phase[1] + rank.phase[2]);
  double makespan = passes;
  if (schedule && ranks > 1) {
    pp::ScheduleOptions options;
    options.stages = schedule->stages;
    options.microbatches = schedule->microbatches;
    options.virtualStages = schedule->virtualStages;
    options.forwardCost = std::max(rank.phase[0], 1e-12);
    double backward = rank.phase[1] + rank.phase[2];
    bool split = schedule->kind == pp::ScheduleKind::ZeroBubble;
    options.backwardInputCost =
        std::max(split ? rank.phase[1] : backward / 2, 1e-12);
    options.backwardWeightCost =
        std::max(split ? rank.phase[2] : backward / 2, 1e-12);
    if (pp::ErrorOr<pp::Timeline> timeline = pp::simulate(*schedule, options))
      makespan = timeline->makespan;
  }
  cost.bubbleSeconds = std::max(0.0, makespan - passes);
  return cost;
}

void mlir::moe::printCostReport(const StepCost &cost,
                                const ClusterSpec &cluster,
                                llvm::raw_ostream &os) {
  os << "cost per step on " << cluster.name << " (" << cost.ranks << " x "
     << cluster.gpu.name << "), per rank";
  if (cost.pipelineRanks > 1)
    os << ", pipeline rank " << cost.busiestRank << " of " << cost.pipelineRanks
       << " (the busiest), " << cost.microbatches << " microbatches";
  os << "\n";
  auto row = [&](llvm::StringRef what, double seconds) {
    os << llvm::format("  %-36s %10.3f ms\n", what.str().c_str(),
                       seconds * 1e3);
  };
  row("GEMMs and attention (roofline)", cost.gemmSeconds);
  row("other kernels (HBM bandwidth)", cost.memorySeconds);
  for (const auto &[kind, seconds] : cost.commSeconds)
    row(kind, seconds);
  row("  of it hidden behind compute", cost.commTotal() - cost.exposedComm());
  if (cost.pipelineRanks > 1)
    row("pipeline bubble", cost.bubbleSeconds);
  row("step", cost.total());
  double total = cost.total();
  double flopsPerSecond = total > 0 ? cost.modelFlops / total : 0;
  os << llvm::format("  tokens/s %.4g, model FLOP/s per GPU %.4g, MFU %.1f%%\n",
                     total > 0 ? cost.tokens / total : 0.0, flopsPerSecond,
                     100.0 * flopsPerSecond / cluster.gpu.peakFlops(false));
  double gib = cost.peakMemoryBytes / 1073741824.0;
  os << llvm::format("  peak memory per rank %.2f GiB of %.0f GiB (the compiled "
                     "memory plan)%s\n",
                     gib, cluster.gpu.memoryGiB,
                     gib <= cluster.gpu.memoryGiB ? "" : ": does not fit");
  // What the GPU's backend runs (the step's FP8 is costed only where it
  // runs the recipe).
  if (const ::moe::caps::Capabilities *record = capabilitiesOf(cluster.gpu))
    os << "  target " << record->target << " on the " << record->backend
       << " backend: " << ::moe::caps::describeCapabilities(*record) << "\n";
  else
    os << "  no moec target has compute capability "
       << cluster.gpu.computeCapability << "\n";
}
