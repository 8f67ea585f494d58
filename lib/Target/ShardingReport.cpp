//===- ShardingReport.cpp - moec --report=sharding ------------------------===//
#include "moe/Target/ShardingReport.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <map>

using namespace mlir;
using namespace mlir::moe;

static std::string shapeText(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(shape, os);
  return text + "]";
}

static std::string shardingText(ShardingAttr sharding) {
  if (!sharding)
    return "?";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(sharding.getDims(), os, [&](Attribute dim) {
    os << "{";
    llvm::interleaveComma(cast<ArrayAttr>(dim), os, [&](Attribute axis) {
      os << cast<StringAttr>(axis).getValue();
    });
    os << "}";
  });
  os << "]";
  return text;
}

static std::string mib(uint64_t bytes) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.3f MiB", bytes / 1048576.0);
  return text;
}

/// The bytes of a tensor of `type`'s element type in `shape` (its own or a
/// rank's block of it).
static uint64_t bytesOf(ShapedType type, ArrayRef<int64_t> shape) {
  return tensorBytes(type.clone(shape));
}

LogicalResult mlir::moe::printShardingReport(ModuleOp module,
                                             func::FuncOp step,
                                             llvm::raw_ostream &os) {
  MeshOp mesh = getMesh(module);
  if (!mesh)
    return module.emitError()
           << "no moe.mesh to report on (moec --mesh dp=2,tp=2)";
  os << "mesh @" << mesh.getSymName() << ":";
  for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getShape()))
    os << " " << cast<StringAttr>(axis).getValue() << "=" << size;
  os << " (" << mesh.getNumRanks() << " ranks)\n\n";

  os << "parameters (storage per rank)\n";
  uint64_t weightBytes = 0, weightBytesPerRank = 0;
  uint64_t stateBytes = 0, stateBytesPerRank = 0;
  uint64_t copyBytes = 0, copyBytesPerRank = 0;
  uint64_t routerBytes = 0, routerBytesPerRank = 0;
  for (ParamOp param : module.getOps<ParamOp>()) {
    RankedTensorType type = param.getTensorType();
    ShardingAttr sharding = param.getSharding() ? *param.getSharding()
                                                : ShardingAttr();
    SmallVector<int64_t> local = localShape(type, sharding, mesh);
    bool weight = param.getKind() == ParamKind::weight;
    if (param.getKind() == ParamKind::working_copy) {
      // Stored like its master; what the forward reads and FSDP gathers.
      copyBytes += tensorBytes(type);
      copyBytesPerRank += bytesOf(type, local);
      continue;
    }
    if (param.getKind() == ParamKind::router_bias ||
        param.getKind() == ParamKind::expert_load) {
      routerBytes += tensorBytes(type);
      routerBytesPerRank += bytesOf(type, local);
      continue;
    }
    (weight ? weightBytes : stateBytes) += tensorBytes(type);
    (weight ? weightBytesPerRank : stateBytesPerRank) += bytesOf(type, local);
    if (!weight)
      continue; // moments are stored like their weight
    os << "  " << param.getSymName() << " " << shapeText(type.getShape())
       << " " << shardingText(sharding) << " -> " << shapeText(local) << ", "
       << mib(bytesOf(type, local)) << "\n";
    auto whys = param->getAttrOfType<ArrayAttr>(kParamShardingOriginAttrName);
    bool split = false;
    for (auto [dim, why] : llvm::enumerate(
             whys ? whys.getAsValueRange<StringAttr>()
                  : ArrayAttr().getAsValueRange<StringAttr>())) {
      if (why.empty())
        continue;
      os << "      dim " << dim << ": " << why << "\n";
      split = true;
    }
    if (!split)
      os << "      replicated: no parallelism splits it\n";
  }
  auto total = [&](StringRef what, uint64_t perRank, uint64_t all) {
    os << llvm::format("  %s: %llu bytes per rank of %llu (1/%.2f)\n",
                       what.str().c_str(),
                       static_cast<unsigned long long>(perRank),
                       static_cast<unsigned long long>(all),
                       perRank ? static_cast<double>(all) / perRank : 0.0);
  };
  total("total weights", weightBytesPerRank, weightBytes);
  total("total AdamW moments (stored like their weights)", stateBytesPerRank,
        stateBytes);
  if (copyBytes > 0)
    total("total bf16 working copies (stored like their masters)",
          copyBytesPerRank, copyBytes);
  if (routerBytes > 0)
    total("total router biases and load counters (on every rank)",
          routerBytesPerRank, routerBytes);
  os << "\n";

  os << "tensors of @" << step.getSymName() << " (per rank)\n";
  auto printValue = [&](Value value, StringRef what) {
    auto type = cast<ShapedType>(value.getType());
    ShardingAttr sharding = getRecordedSharding(value);
    SmallVector<int64_t> local = localShape(type, sharding, mesh);
    os << "  " << what << " " << shapeText(type.getShape()) << " "
       << shardingText(sharding) << " -> " << shapeText(local) << ", "
       << bytesOf(type, local) << " bytes\n      why: "
       << getRecordedShardingOrigin(value) << "\n";
  };
  for (BlockArgument arg : step.getArguments())
    printValue(arg, ("argument " + Twine(arg.getArgNumber())).str());
  for (Operation &op : step.getBody().front()) {
    if (isa<GetParamOp>(op))
      continue;
    for (Value result : op.getResults()) {
      std::string what;
      llvm::raw_string_ostream(what) << op.getName() << " at " << op.getLoc();
      printValue(result, what);
    }
  }
  return success();
}

void mlir::moe::printCollectivesReport(func::FuncOp step,
                                       llvm::raw_ostream &os) {
  auto module = step->getParentOfType<ModuleOp>();
  MeshOp mesh = getMesh(module);
  auto groupSize = [&](ArrayAttr axes) {
    int64_t n = 1;
    for (StringRef axis : axes.getAsValueRange<StringAttr>())
      n *= mesh.getAxisSize(axis).value_or(1);
    return n;
  };
  auto axesText = [](ArrayAttr axes) {
    return llvm::join(axes.getAsValueRange<StringAttr>(), ",");
  };
  os << "\ncollectives per rank and step (bytes sent by a ring algorithm)\n";
  // Totals per kind and group.
  std::map<std::string, std::pair<int64_t, double>> totals;
  step.walk([&](Operation *op) {
    StringRef kind;
    ArrayAttr axes;
    uint64_t bytes = 0;
    double factor = 0;
    if (auto ar = dyn_cast<AllReduceOp>(op)) {
      kind = "all_reduce";
      axes = ar.getAxes();
      bytes = tensorBytes(ar.getType());
      factor = 2.0 * (groupSize(axes) - 1) / groupSize(axes);
    } else if (auto ag = dyn_cast<AllGatherOp>(op)) {
      kind = "all_gather";
      axes = ag.getAxes();
      bytes = tensorBytes(ag.getType());
      factor = double(groupSize(axes) - 1) / groupSize(axes);
    } else if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
      kind = "reduce_scatter";
      axes = rs.getAxes();
      bytes = tensorBytes(rs.getInput().getType());
      factor = double(groupSize(axes) - 1) / groupSize(axes);
    } else if (auto bucket = dyn_cast<ReduceBucketOp>(op)) {
      // As its members would be, in one message.
      kind = bucket.getScatter() ? "reduce_scatter" : "all_reduce";
      axes = bucket.getAxes();
      for (Value input : bucket.getInputs())
        bytes += tensorBytes(input.getType());
      int64_t n = groupSize(axes);
      factor = (bucket.getScatter() ? 1.0 : 2.0) * (n - 1) / n;
    } else if (auto slice = dyn_cast<SliceOp>(op)) {
      kind = "slice";
      axes = slice.getAxes();
      bytes = tensorBytes(slice.getInput().getType());
    } else if (isa<ExpertsOp, ExpertsGradOp>(op) &&
               op->getAttrOfType<ArrayAttr>("expert_axes")) {
      // Expert parallelism: every assignment's token row goes to its
      // expert's rank and the result comes back (backward also sends the
      // gradient row). Counts depend on the routing; the figure assumes it
      // is balanced, so (n - 1) / n of the rows leave the rank.
      kind = "all_to_all";
      axes = op->getAttrOfType<ArrayAttr>("expert_axes");
      auto x = cast<ShapedType>(op->getOperand(isa<ExpertsOp>(op) ? 0 : 1)
                                    .getType());
      auto routing = cast<ShapedType>(
          op->getOperand(isa<ExpertsOp>(op) ? 1 : 2).getType());
      int64_t rows = routing.getNumElements();
      uint64_t row = x.getDimSize(x.getRank() - 1) *
                     elementBytes(x.getElementType());
      if (auto grad = dyn_cast<ExpertsGradOp>(op)) {
        // Backward also sends each assignment's routing weight and id.
        uint64_t routingBytes =
            elementBytes(routing.getElementType()) +
            elementBytes(grad.getIndices().getType().getElementType());
        bytes = rows * (3 * row + routingBytes);
      } else {
        bytes = 2 * rows * row;
      }
      factor = double(groupSize(axes) - 1) / groupSize(axes);
    } else {
      return;
    }
    double sent = bytes * factor;
    os << llvm::format("  %-14s over {%s}: ", kind.str().c_str(),
                       axesText(axes).c_str());
    if (op->getNumResults() > 1)
      os << "bucket of " << op->getNumResults() << " gradients";
    else
      os << shapeText(cast<ShapedType>(op->getResult(0).getType()).getShape());
    // The dtype moved, where it is not the fp32 of every step before mixed
    // precision (expert rows: the token rows'; with FP8 dispatch the codes
    // are a runtime choice).
    Type moved = isa<ExpertsOp, ExpertsGradOp>(op)
                     ? cast<ShapedType>(op->getOperand(isa<ExpertsOp>(op) ? 0 : 1)
                                            .getType())
                           .getElementType()
                     : cast<ShapedType>(op->getOperand(0).getType())
                           .getElementType();
    if (!moved.isF32())
      os << " of " << moved;
    os << llvm::format(", %.0f bytes sent", sent) << "  at " << op->getLoc()
       << "\n";
    auto &total = totals[(kind + " {" + axesText(axes) + "}").str()];
    ++total.first;
    total.second += sent;
  });
  os << "  totals:\n";
  for (const auto &[what, total] : totals)
    os << llvm::format("    %-30s %4lld ops, %12.0f bytes\n", what.c_str(),
                       static_cast<long long>(total.first), total.second);
}
