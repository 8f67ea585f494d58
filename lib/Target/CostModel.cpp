//===- CostModel.cpp - predicted step time on a cluster -------------------===//
#include "moe/Target/CostModel.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

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
  if (auto grad = dyn_cast<AttentionGradOp>(op)) {
    auto q = grad.getQuery().getType().getShape();
    double b = q[0], s = q[1], width = q[2];
    // Recomputed scores, dP, dV, dQ and dK over the causal triangle.
    return 5.0 * 2.0 * b * width * s * (s + 1) / 2.0;
  }
  if (auto grad = dyn_cast<ExpertsGradOp>(op)) {
    auto w1 = grad.getW1().getType().getShape();
    double assignments = grad.getWeights().getType().getNumElements();
    // W1 x and W3 x again, dy W2, dW2, dx (two) and dW1, dW3.
    return 2.0 * assignments * 8.0 * w1[1] * w1[2];
  }
  return 0;
}

bool readsFp8(Operation *op) {
  if (auto experts = dyn_cast<ExpertsOp>(op))
    return experts.getFp8().has_value();
  if (auto grad = dyn_cast<ExpertsGradOp>(op))
    return grad.getFp8().has_value();
  return false;
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

/// A group of the mesh over `axes`: its size, and whether the ranks of one
/// group (rank 0's, ranks numbered row-major, the last axis fastest) share
/// a node.
struct GroupShape {
  int64_t size = 1;
  bool withinNode = true;
};

GroupShape groupShape(MeshOp mesh, ArrayAttr axes, int64_t gpusPerNode) {
  GroupShape group;
  if (!mesh || !axes)
    return group;
  SmallVector<StringRef> names(mesh.getAxes().getAsValueRange<StringAttr>());
  ArrayRef<int64_t> shape = mesh.getShape();
  int64_t farthest = 0, stride = 1;
  for (int64_t i = static_cast<int64_t>(names.size()) - 1; i >= 0; --i) {
    if (llvm::is_contained(axes.getAsValueRange<StringAttr>(), names[i])) {
      group.size *= shape[i];
      farthest += (shape[i] - 1) * stride;
    }
    stride *= shape[i];
  }
  group.withinNode = farthest < gpusPerNode;
  return group;
}

/// Alpha-beta time of moving `fraction` of `bytes` per rank in `steps`.
double transfer(const ClusterSpec &cluster, const GroupShape &group,
                double bytes, double fraction, double steps) {
  double bandwidth =
      (group.withinNode ? cluster.nvlinkGBps : cluster.internodeGBps) * 1e9;
  double latency = (group.withinNode ? cluster.nvlinkLatencyUs
                                     : cluster.internodeLatencyUs) *
                   1e-6;
  return fraction * bytes / bandwidth + steps * latency;
}

} // namespace

double StepCost::commTotal() const {
  double sum = 0;
  for (const auto &[kind, seconds] : commSeconds)
    sum += seconds;
  return sum;
}

StepCost mlir::moe::estimateStepCost(ModuleOp module, func::FuncOp step,
                                     const ClusterSpec &cluster) {
  StepCost cost;
  ModelStatistics stats = computeModelStatistics(module, step);
  cost.modelFlops = stats.flopsPerStep;
  cost.ranks = stats.ranks;
  cost.tokens = stats.batch * stats.seq;
  MeshOp mesh = getMesh(module);
  const GpuSpec &gpu = cluster.gpu;
  step.walk([&](Operation *op) {
    auto collective = [&](const char *kind, ArrayAttr axes, double bytes,
                          bool allReduce) {
      GroupShape group = groupShape(mesh, axes, cluster.gpusPerNode);
      if (group.size <= 1)
        return;
      double n = static_cast<double>(group.size);
      cost.commSeconds[kind] +=
          allReduce ? transfer(cluster, group, bytes, 2 * (n - 1) / n, 2 * (n - 1))
                    : transfer(cluster, group, bytes, (n - 1) / n, n - 1);
    };
    if (auto reduce = dyn_cast<AllReduceOp>(op))
      return collective("all-reduce", reduce.getAxes(),
                        tensorBytes(reduce.getInput().getType()), true);
    if (auto gather = dyn_cast<AllGatherOp>(op))
      return collective("all-gather", gather.getAxes(),
                        tensorBytes(gather.getResult().getType()), false);
    if (auto scatter = dyn_cast<ReduceScatterOp>(op))
      return collective("reduce-scatter", scatter.getAxes(),
                        tensorBytes(scatter.getInput().getType()), false);
    double flops = executedFlops(op);
    if (flops > 0)
      cost.gemmSeconds += std::max(flops / gpu.peakFlops(readsFp8(op)),
                                   bytesOf(op) / gpu.hbmBytesPerSecond());
    else if (!isa<func::ReturnOp, GetParamOp, ConstantOp>(op) &&
             op->getDialect() && op->getNumResults() + op->getNumOperands())
      cost.memorySeconds += bytesOf(op) / gpu.hbmBytesPerSecond();
    // Expert parallelism: each routed token's row goes to its expert's
    // rank and back (forward x out and y back; backward x, dy and the
    // weight out, dx and its weight gradient back).
    auto exchange = [&](std::optional<ArrayAttr> axes, Value x, Value weights,
                        double widths) {
      if (!axes)
        return;
      double rows = cast<ShapedType>(weights.getType()).getNumElements();
      double width = cast<ShapedType>(x.getType()).getShape().back();
      collective("expert all-to-all", *axes, rows * width * widths * 4.0,
                 false);
    };
    if (auto experts = dyn_cast<ExpertsOp>(op))
      exchange(experts.getExpertAxes(), experts.getInput(),
               experts.getWeights(), 2.0);
    if (auto grad = dyn_cast<ExpertsGradOp>(op))
      exchange(grad.getExpertAxes(), grad.getInput(), grad.getWeights(), 3.0);
  });
  return cost;
}

void mlir::moe::printCostReport(const StepCost &cost,
                                const ClusterSpec &cluster,
                                llvm::raw_ostream &os) {
  os << "cost per step on " << cluster.name << " (" << cost.ranks << " x "
     << cluster.gpu.name << "), per rank, no overlap assumed\n";
  auto row = [&](llvm::StringRef what, double seconds) {
    os << llvm::format("  %-36s %10.3f ms\n", what.str().c_str(),
                       seconds * 1e3);
  };
  row("GEMMs and attention (roofline)", cost.gemmSeconds);
  row("other kernels (HBM bandwidth)", cost.memorySeconds);
  for (const auto &[kind, seconds] : cost.commSeconds)
    row(kind, seconds);
  row("step", cost.total());
  double total = cost.total();
  double flopsPerSecond = total > 0 ? cost.modelFlops / total : 0;
  os << llvm::format("  tokens/s %.4g, model FLOP/s per GPU %.4g, MFU %.1f%%\n",
                     total > 0 ? cost.tokens / total : 0.0, flopsPerSecond,
                     100.0 * flopsPerSecond / cluster.gpu.peakFlops(false));
}
