//===- ShardingReport.cpp - moec --report=sharding ------------------------===//
#include "moe/Target/ShardingReport.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/Support/Format.h"

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

static uint64_t bytesOf(ArrayRef<int64_t> shape) {
  uint64_t elements = 1;
  for (int64_t d : shape)
    elements *= d;
  return elements * 4;
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
  for (ParamOp param : module.getOps<ParamOp>()) {
    RankedTensorType type = param.getTensorType();
    ShardingAttr sharding = param.getSharding() ? *param.getSharding()
                                                : ShardingAttr();
    SmallVector<int64_t> local = localShape(type, sharding, mesh);
    bool weight = param.getKind() == ParamKind::weight;
    (weight ? weightBytes : stateBytes) += bytesOf(type.getShape());
    (weight ? weightBytesPerRank : stateBytesPerRank) += bytesOf(local);
    if (!weight)
      continue; // moments are stored like their weight
    os << "  " << param.getSymName() << " " << shapeText(type.getShape())
       << " " << shardingText(sharding) << " -> " << shapeText(local) << ", "
       << mib(bytesOf(local)) << "\n";
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
  os << "\n";

  os << "tensors of @" << step.getSymName() << " (per rank)\n";
  auto printValue = [&](Value value, StringRef what) {
    auto type = cast<ShapedType>(value.getType());
    ShardingAttr sharding = getRecordedSharding(value);
    os << "  " << what << " " << shapeText(type.getShape()) << " "
       << shardingText(sharding) << " -> "
       << shapeText(localShape(type, sharding, mesh)) << "\n      why: "
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
  os << "\ncollectives: chosen by partitioning, which is not implemented yet; "
        "the tensors above are the propagated shardings\n";
  return success();
}
