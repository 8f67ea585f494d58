//===- Partition.cpp - the per-rank program and its collectives -----------===//
//
// Rewrites a step whose shardings were propagated into the program one rank
// runs: local shapes everywhere, and the collectives that make it compute
// what the global step computes. Per op, from its factor rule:
//   * every factor takes the axes its tensors' recorded shardings give it;
//   * operands are resharded to what the factors require: a dimension
//     split over axes it should not be is all-gathered, one that should be
//     split further is sliced (no communication);
//   * a result missing a split factor holds partial sums over that factor's
//     axes: consumers reduce them (all-reduce, or reduce-scatter when they
//     want the result split along a dimension over exactly those axes);
//   * means and norms over split tokens or tensors are not sums: those ops
//     get the axes to reduce over (token_axes, input_axes) and combine
//     their counts and sums themselves.
// Collectives are inserted where a consumer needs them, so FSDP's gather
// lands right before a weight's use and a gradient's reduce-scatter right
// before its AdamW update.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>

namespace mlir::moe {
#define GEN_PASS_DEF_PARTITION
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
using DimAxes = SmallVector<StringRef>;
using Dims = SmallVector<DimAxes>;

/// How the local value of a global tensor is laid out on this rank.
struct Layout {
  Dims dims;
  /// Axes over which the local value is a partial sum.
  llvm::SmallSetVector<StringRef, 4> partial;
};

class Partitioner {
public:
  Partitioner(ModuleOp module, func::FuncOp step, MeshOp mesh)
      : module(module), step(step), mesh(mesh),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        builder(step.getContext()), symbols(module) {}

  LogicalResult run();

private:
  int64_t parts(ArrayRef<StringRef> axes) {
    int64_t n = 1;
    for (StringRef axis : axes)
      n *= *mesh.getAxisSize(axis);
    return n;
  }
  RankedTensorType localType(Type global, const Dims &dims) {
    auto type = cast<RankedTensorType>(global);
    SmallVector<int64_t> shape(type.getShape());
    for (unsigned d = 0; d < shape.size(); ++d)
      shape[d] /= parts(dims[d]);
    return type.clone(shape);
  }
  ArrayAttr axesAttr(ArrayRef<StringRef> axes) {
    return builder.getStrArrayAttr(axes);
  }
  static Dims dimsOf(ShardingAttr sharding) {
    Dims dims;
    for (unsigned d = 0; d < sharding.getDims().size(); ++d)
      dims.push_back(sharding.axesOf(d));
    return dims;
  }

  Value reshard(Value global, const Dims &target, Location loc);
  LogicalResult partitionRuled(Operation *op, const ShardingRule &rule);
  LogicalResult partitionOp(Operation *op);
  DimAxes expertAxesOf(Operation *op, const ShardingRule &rule);
  /// Where an AdamW update applies its gradient: where the weight's
  /// moments are stored.
  Dims updateStorage(AdamWUpdateOp update) {
    auto moments = symbols.lookup<ParamOp>(update.getExpAvgAttr().getAttr());
    return moments.getSharding() ? dimsOf(*moments.getSharding())
                                 : Dims(moments.getTensorType().getRank());
  }
  LogicalResult shardFp8Histories();
  void localizeParams();

  ModuleOp module;
  func::FuncOp step;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  OpBuilder builder;
  /// The module's symbols, looked up once each (a module's own lookup
  /// scans it: quadratic over a step's parameter reads).
  SymbolTable symbols;
  llvm::DenseMap<Value, Value> local;
  llvm::DenseMap<Value, Layout> layouts;
  /// The global types of the step's arguments, which turn local first.
  llvm::DenseMap<Value, Type> globalTypes;
  Type globalType(Value value) {
    Type type = globalTypes.lookup(value);
    return type ? type : value.getType();
  }
  /// The factor rules of the step's ops, taken on the global types.
  llvm::DenseMap<Operation *, ShardingRule> rules;
  /// The all-reduced form of partial values.
  llvm::DenseMap<Value, Value> completed;
  /// Resharded values already built, per global value and target.
  llvm::DenseMap<Value, std::map<std::vector<std::string>, Value>> cache;
};
} // namespace

Value Partitioner::reshard(Value global, const Dims &target, Location loc) {
  std::vector<std::string> key;
  for (const DimAxes &dim : target)
    key.push_back(llvm::join(dim, ","));
  Value &cached = cache[global][key];
  if (cached)
    return cached;

  Value value = local.lookup(global);
  Layout current = layouts.lookup(global);
  auto shaped = [&](Value v) { return cast<RankedTensorType>(v.getType()); };

  // Partial sums first: a reduce-scatter where the target splits a
  // dimension further over partial axes only, an all-reduce for the rest.
  for (unsigned d = 0; d < target.size() && !current.partial.empty(); ++d) {
    ArrayRef<StringRef> have = current.dims[d];
    if (target[d].size() <= have.size() ||
        !llvm::equal(have, ArrayRef(target[d]).take_front(have.size())))
      continue;
    ArrayRef<StringRef> extra = ArrayRef(target[d]).drop_front(have.size());
    if (!llvm::all_of(extra, [&](StringRef a) {
          return current.partial.contains(a);
        }))
      continue;
    SmallVector<int64_t> shape(shaped(value).getShape());
    shape[d] /= parts(extra);
    value = builder.create<ReduceScatterOp>(
        loc, shaped(value).clone(shape), value, meshRef, axesAttr(extra),
        builder.getI64IntegerAttr(d));
    current.dims[d] = target[d];
    for (StringRef axis : extra)
      current.partial.remove(axis);
  }
  if (!current.partial.empty()) {
    // One all-reduce per partial value, whatever its consumers want next.
    Value &complete = completed[global];
    if (!complete) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointAfterValue(value);
      complete = builder.create<AllReduceOp>(
          loc, value, meshRef, axesAttr(current.partial.getArrayRef()));
    }
    value = complete;
    current.partial.clear();
  }
  // Gathers before slices: slicing one dimension by an axis that still
  // splits another would pick the wrong blocks.
  // Only the axes past the common prefix move: a dimension split over
  // {tp, fsdp} that should be split over {tp} gathers over fsdp alone.
  for (unsigned d = 0; d < target.size(); ++d) {
    ArrayRef<StringRef> have = current.dims[d];
    size_t common = 0;
    while (common < have.size() && common < target[d].size() &&
           have[common] == target[d][common])
      ++common;
    ArrayRef<StringRef> gathered = have.drop_front(common);
    if (gathered.empty())
      continue;
    SmallVector<int64_t> shape(shaped(value).getShape());
    shape[d] *= parts(gathered);
    value = builder.create<AllGatherOp>(loc, shaped(value).clone(shape), value,
                                        meshRef, axesAttr(gathered),
                                        builder.getI64IntegerAttr(d));
    current.dims[d].resize(common);
  }
  for (unsigned d = 0; d < target.size(); ++d) {
    ArrayRef<StringRef> extra = ArrayRef(target[d]).drop_front(
        current.dims[d].size());
    if (extra.empty())
      continue;
    SmallVector<int64_t> shape(shaped(value).getShape());
    shape[d] /= parts(extra);
    value = builder.create<SliceOp>(loc, shaped(value).clone(shape), value,
                                    meshRef, axesAttr(extra),
                                    builder.getI64IntegerAttr(d));
    current.dims[d] = target[d];
  }
  cached = value;
  return value;
}

/// The axes of every factor of `op` from the recorded shardings of its
/// tensors (the outermost factor of a dimension takes the dimension's
/// axes; pinned factors take none), in this order:
///   1. contracted factors (missing from a result), from the operands: a
///      row-parallel linear keeps its split input features and leaves a
///      partial sum, rather than gathering its input;
///   2. the other factors, from the results, then from the operands.
/// A factor never takes an axis of a factor it shares a tensor with.
static SmallVector<DimAxes> factorAxes(Operation *op, const ShardingRule &rule) {
  size_t numFactors = rule.getFactors().size();
  SmallVector<DimAxes> axes(numFactors);
  SmallVector<bool> set(numFactors, false);
  SmallVector<llvm::SmallSet<unsigned, 8>> together =
      rule.coOccurringFactors();
  llvm::SmallSet<unsigned, 8> contracted;
  // The experts' expert factor is contracted like any other, but splitting
  // it and the tokens over one axis is expert parallelism (tokens travel to
  // their experts), not a clash.
  std::optional<unsigned> expertFactor;
  if (isa<ExpertsOp, ExpertsGradOp>(op))
    expertFactor = rule.getOperands()[4][0].front();
  auto isExpertExchange = [&](unsigned expert, unsigned token) {
    return expert == expertFactor &&
           StringRef(rule.getFactors()[token].name).starts_with("*");
  };
  for (unsigned f = 0; f < numFactors; ++f)
    for (const ShardingRule::TensorFactors &dims : rule.getResults()) {
      if (llvm::any_of(dims, [&](const auto &dim) {
            return llvm::is_contained(dim, f);
          }))
        continue;
      contracted.insert(f);
      // A result partial over f's axes must not also be split over them by
      // another factor: the ranks summing it would hold different blocks.
      for (const auto &dim : dims)
        for (unsigned g : dim) {
          if (isExpertExchange(f, g) || isExpertExchange(g, f))
            continue;
          together[f].insert(g);
          together[g].insert(f);
        }
    }

  auto take = [&](Value value, const ShardingRule::TensorFactors &dims,
                  bool onlyContracted) {
    ShardingAttr sharding = getRecordedSharding(value);
    if (!sharding)
      return;
    for (unsigned d = 0; d < dims.size(); ++d) {
      if (dims[d].empty())
        continue;
      unsigned f = dims[d].front();
      DimAxes dimAxes = sharding.axesOf(d);
      if (set[f] || rule.getFactors()[f].pinned || dimAxes.empty() ||
          (onlyContracted && !contracted.contains(f)))
        continue;
      DimAxes usable = clashFreePrefix(dimAxes, together[f], axes);
      if (usable.empty())
        continue;
      axes[f] = usable;
      set[f] = true;
    }
  };
  // The experts' backward contracts the tokens (weight gradients) as well
  // as the expert width (dx): it takes the width's split from the weights
  // first, as its forward does, and gathers the tokens' gradients, instead
  // of gathering every expert weight (the larger tensors by far).
  if (isa<ExpertsGradOp>(op))
    for (unsigned weight : {4u, 5u, 6u})
      take(op->getOperand(weight), rule.getOperands()[weight],
           /*onlyContracted=*/true);
  // A weight gradient takes its weight's split first (its output and input
  // features), as the forward's linear used it, and sums its tokens locally
  // only over what is left: under tp it reads the local slice of the
  // output gradient and the gathered input, instead of gathering the
  // gradient and reduce-scattering a full weight-sized partial sum.
  if (isa<LinearGradWeightOp>(op))
    take(op->getResult(0), rule.getResults()[0], /*onlyContracted=*/false);
  for (auto [operand, dims] : llvm::zip(op->getOperands(), rule.getOperands()))
    take(operand, dims, /*onlyContracted=*/true);
  for (auto [result, dims] : llvm::zip(op->getResults(), rule.getResults()))
    take(result, dims, /*onlyContracted=*/false);
  for (auto [operand, dims] : llvm::zip(op->getOperands(), rule.getOperands()))
    take(operand, dims, /*onlyContracted=*/false);
  return axes;
}

/// The layout the factors give a tensor: each dimension the axes of its
/// outermost factor, when they divide it and are not used by another
/// dimension of the tensor.
static Dims project(const ShardingRule::TensorFactors &dims,
                    ArrayRef<DimAxes> axes, ShapedType type, MeshOp mesh) {
  Dims out(dims.size());
  llvm::SmallSet<StringRef, 8> used;
  for (unsigned d = 0; d < dims.size(); ++d) {
    if (dims[d].empty())
      continue;
    const DimAxes &candidate = axes[dims[d].front()];
    int64_t n = 1;
    bool clash = false;
    for (StringRef axis : candidate) {
      n *= *mesh.getAxisSize(axis);
      clash |= used.contains(axis);
    }
    if (candidate.empty() || clash || type.getDimSize(d) % n != 0)
      continue;
    out[d] = candidate;
    used.insert(candidate.begin(), candidate.end());
  }
  return out;
}

LogicalResult Partitioner::partitionRuled(Operation *op,
                                          const ShardingRule &rule) {
  SmallVector<DimAxes> axes = factorAxes(op, rule);

  // Expert parallelism: experts split over axes that also split the
  // tokens. The runtime exchanges tokens within that group (all-to-all), so
  // the expert factor contributes no partial sums.
  DimAxes expertAxes;
  if (isa<ExpertsOp, ExpertsGradOp>(op)) {
    expertAxes = expertAxesOf(op, rule);
    DimAxes tokenAxesOfOp;
    for (auto [f, factor] : llvm::enumerate(rule.getFactors()))
      if (StringRef(factor.name).starts_with("*"))
        llvm::append_range(tokenAxesOfOp, axes[f]);
    for (StringRef axis : expertAxes)
      if (!llvm::is_contained(tokenAxesOfOp, axis))
        return op->emitOpError()
               << "splits experts over '" << axis
               << "' but not its tokens: expert parallelism folds onto the "
                  "data-parallel ranks";
  }

  // Context parallelism's load-balanced split is the outermost split of a
  // dimension: the collectives and kernels lay a block out that way only.
  for (const DimAxes &factor : axes)
    if (llvm::is_contained(factor, kContextAxis) &&
        factor.front() != kContextAxis)
      return op->emitOpError()
             << "would split a dimension over " << llvm::join(factor, ", ")
             << ": '" << kContextAxis << "' must be its outermost axis";

  IRMapping mapping;
  for (auto [operand, dims] : llvm::zip(op->getOperands(), rule.getOperands()))
    mapping.map(operand,
                reshard(operand,
                        project(dims, axes,
                                cast<ShapedType>(globalType(operand)), mesh),
                        op->getLoc()));
  Operation *clone = builder.clone(*op, mapping);
  clone->removeAttr(kShardingAttrName);
  clone->removeAttr(kShardingOriginAttrName);

  // Factors split but missing from a result make it partial over their axes.
  llvm::SmallSetVector<StringRef, 4> tokenAxes;
  for (auto [f, factor] : llvm::enumerate(rule.getFactors()))
    if (StringRef(factor.name).starts_with("*"))
      tokenAxes.insert(axes[f].begin(), axes[f].end());
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    const ShardingRule::TensorFactors &dims = rule.getResults()[i];
    auto type = cast<ShapedType>(result.getType());
    Layout layout;
    layout.dims = project(dims, axes, type, mesh);
    llvm::SmallSet<unsigned, 8> present;
    for (const auto &dim : dims)
      present.insert(dim.begin(), dim.end());
    for (auto [f, factorAxesOf] : llvm::enumerate(axes))
      if (!present.contains(f))
        layout.partial.insert(factorAxesOf.begin(), factorAxesOf.end());
    // A factor present in the result but not projected onto it would leave
    // the result split in a way no layout describes.
    for (unsigned d = 0; d < dims.size(); ++d)
      for (unsigned f : dims[d])
        if (!axes[f].empty() && layout.dims[d] != axes[f])
          return op->emitOpError()
                 << "cannot partition result " << i << ": dimension " << d
                 << " should be split over " << llvm::join(axes[f], ", ");
    if (!rule.partialResultsAreSums())
      layout.partial.clear();
    for (StringRef axis : expertAxes)
      layout.partial.remove(axis);
    clone->getResult(i).setType(localType(type, layout.dims));
    local[result] = clone->getResult(i);
    layouts[result] = layout;
  }

  // Means and norms over split tokens or tensors combine across ranks.
  auto tokens = axesAttr(tokenAxes.getArrayRef());
  // This rank's share of `heads` split along operand 0's last dimension.
  auto localHeads = [&](int64_t heads) {
    return heads / parts(axes[rule.getOperands()[0].back().front()]);
  };
  // The axes of one leading dimension (the batch is *0, the sequence *1).
  auto leadingAxes = [&](int dim) {
    for (auto [f, factor] : llvm::enumerate(rule.getFactors()))
      if (factor.name == "*" + std::to_string(dim))
        return axesAttr(axes[f]);
    return axesAttr({});
  };
  auto sequenceAxes = [&]() -> ArrayAttr {
    const DimAxes &split = axes[rule.getOperands()[0][1].front()];
    return split.empty() ? ArrayAttr() : axesAttr(split);
  };
  if (!expertAxes.empty()) {
    if (auto experts = dyn_cast<ExpertsOp>(clone))
      experts.setExpertAxesAttr(axesAttr(expertAxes));
    if (auto experts = dyn_cast<ExpertsGradOp>(clone))
      experts.setExpertAxesAttr(axesAttr(expertAxes));
  }
  llvm::TypeSwitch<Operation *>(clone)
      .Case([&](CrossEntropyOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](CrossEntropyGradOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](LinearCrossEntropyOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](LinearCrossEntropyGradOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](AuxLossOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](AuxLossGradOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](ExpertLoadOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](ZLossOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](ZLossGradOp o) { o.setTokenAxesAttr(tokens); })
      .Case([&](SequenceAuxLossOp o) {
        o.setBatchAxesAttr(leadingAxes(0));
        o.setSequenceAxesAttr(leadingAxes(1));
      })
      .Case([&](SequenceAuxLossGradOp o) {
        o.setBatchAxesAttr(leadingAxes(0));
        o.setSequenceAxesAttr(leadingAxes(1));
      })
      // Heads split over tp leave each rank a share of them. Every op with
      // heads has their factor (or their groups', for attention) first in
      // operand 0's last dimension.
      .Case([&](RMSNormOp o) {
        if (std::optional<uint64_t> heads = o.getNumHeads())
          o.setNumHeads(localHeads(*heads));
      })
      .Case([&](RMSNormGradOp o) {
        if (std::optional<uint64_t> heads = o.getNumHeads())
          o.setNumHeads(localHeads(*heads));
      })
      .Case(
          [&](ConcatHeadsOp o) { o.setNumHeads(localHeads(o.getNumHeads())); })
      .Case([&](SplitHeadsOp o) { o.setNumHeads(localHeads(o.getNumHeads())); })
      // A split sequence (context parallelism) tells them their rank's
      // block of it: the axes of operand 0's sequence factor.
      .Case([&](RoPEOp o) {
        o.setNumHeads(localHeads(o.getNumHeads()));
        o.setSequenceAxesAttr(sequenceAxes());
      })
      .Case([&](RoPEGradOp o) {
        o.setNumHeads(localHeads(o.getNumHeads()));
        o.setSequenceAxesAttr(sequenceAxes());
      })
      .Case([&](AttentionOp o) {
        o.setNumHeads(localHeads(o.getNumHeads()));
        o.setNumKvHeads(localHeads(o.getNumKvHeads()));
        o.setSequenceAxesAttr(sequenceAxes());
      })
      .Case([&](AttentionGradOp o) {
        o.setNumHeads(localHeads(o.getNumHeads()));
        o.setNumKvHeads(localHeads(o.getNumKvHeads()));
        o.setSequenceAxesAttr(sequenceAxes());
      });
  return success();
}

LogicalResult Partitioner::partitionOp(Operation *op) {
  builder.setInsertionPoint(op);
  Location loc = op->getLoc();
  if (auto add = dyn_cast<AddOp>(op)) {
    // A sum of partial sums laid out alike is a partial sum: reducing once,
    // where it is consumed, beats reducing each term (gradient fan-in).
    // lookup, not operator[]: inserting one operand could rehash the map
    // under a reference to the other.
    Layout lhs = layouts.lookup(add.getLhs());
    Layout rhs = layouts.lookup(add.getRhs());
    if (!lhs.partial.empty() && lhs.dims == rhs.dims &&
        lhs.partial.getArrayRef() == rhs.partial.getArrayRef()) {
      Value sum = builder.create<AddOp>(loc, local.lookup(add.getLhs()),
                                        local.lookup(add.getRhs()));
      local[add.getResult()] = sum;
      layouts[add.getResult()] = lhs;
      return success();
    }
  }
  if (auto read = dyn_cast<GetParamOp>(op)) {
    auto param = symbols.lookup<ParamOp>(read.getParamAttr().getAttr());
    Value value = builder.create<GetParamOp>(loc, param.getTensorType(),
                                             read.getParamAttr());
    local[read.getResult()] = value;
    layouts[read.getResult()].dims =
        param.getSharding() ? dimsOf(*param.getSharding())
                            : Dims(param.getTensorType().getRank());
    return success();
  }
  if (auto pin = dyn_cast<ShardOp>(op)) {
    Value value = reshard(pin.getInput(), dimsOf(pin.getSharding()), loc);
    local[pin.getResult()] = value;
    layouts[pin.getResult()].dims = dimsOf(pin.getSharding());
    return success();
  }
  if (auto update = dyn_cast<AdamWUpdateOp>(op)) {
    // The gradient is applied where the moments are stored: the weight's
    // own storage, or ZeRO-1's block of it, which then gathers the copy
    // the forward reads over the axes that split the block further.
    Dims state = updateStorage(update);
    FlatSymbolRefAttr wholeRef = update.getWorkingCopyAttr()
                                     ? update.getWorkingCopyAttr()
                                     : update.getParamAttr();
    auto whole = symbols.lookup<ParamOp>(wholeRef.getAttr());
    auto moments = symbols.lookup<ParamOp>(update.getExpAvgAttr().getAttr());
    std::optional<SmallVector<StringRef>> gathered =
        rowBlockAxes(whole.getShardingAttr(), moments.getShardingAttr(),
                     whole.getTensorType().getRank());
    if (!gathered)
      return update.emitOpError()
             << "stores the moments of " << update.getParamAttr()
             << " neither where " << wholeRef
             << " is nor in blocks of its dimension 0 (ZeRO-1)";
    IRMapping mapping;
    mapping.map(update.getGrad(), reshard(update.getGrad(), state, loc));
    for (Value scalar : {update.getLr(), update.getGradScale(), update.getStep()})
      mapping.map(scalar, reshard(scalar, {}, loc));
    auto clone = cast<AdamWUpdateOp>(builder.clone(*op, mapping));
    if (!gathered->empty()) {
      clone.setMeshAttr(meshRef);
      clone.setGatherAxesAttr(axesAttr(*gathered));
    }
    return success();
  }
  // Every rank holds the whole batch's load (moe.expert_load summed it over
  // the tokens' axes) and a replica of the bias: a local update.
  if (isa<ExpertLoadUpdateOp>(op)) {
    builder.clone(*op);
    return success();
  }
  if (auto update = dyn_cast<Fp8AmaxUpdateOp>(op)) {
    // The ranks that differ only on the axes the history is not split over
    // hold the same block: their amaxes combine into one maximum.
    auto param = symbols.lookup<ParamOp>(update.getHistoryAttr().getAttr());
    DimAxes split;
    if (param.getSharding())
      split = param.getSharding()->axesOf(0);
    SmallVector<StringRef> copies;
    for (StringRef axis : mesh.getAxes().getAsValueRange<StringAttr>())
      if (!llvm::is_contained(split, axis) && *mesh.getAxisSize(axis) > 1)
        copies.push_back(axis);
    auto clone = cast<Fp8AmaxUpdateOp>(builder.clone(*op));
    if (!copies.empty()) {
      clone.setMeshAttr(meshRef);
      clone.setAxesAttr(axesAttr(copies));
    }
    return success();
  }
  if (auto norm = dyn_cast<GlobalNormOp>(op)) {
    // Gradients are norm'ed where their AdamW update wants them (FSDP: the
    // reduce-scattered shards), so the reduction is shared and each rank
    // sums the squares of its own shard only.
    IRMapping mapping;
    SmallVector<Attribute> perInput;
    for (Value grad : norm.getInputs()) {
      Dims dims = Dims(cast<ShapedType>(grad.getType()).getRank());
      if (ShardingAttr recorded = getRecordedSharding(grad))
        dims = dimsOf(recorded);
      for (Operation *user : grad.getUsers())
        if (auto update = dyn_cast<AdamWUpdateOp>(user))
          dims = updateStorage(update);
      mapping.map(grad, reshard(grad, dims, loc));
      DimAxes all;
      for (const DimAxes &dim : dims)
        all.append(dim.begin(), dim.end());
      perInput.push_back(axesAttr(all));
    }
    auto clone = cast<GlobalNormOp>(builder.clone(*op, mapping));
    clone->removeAttr(kShardingAttrName);
    clone->removeAttr(kShardingOriginAttrName);
    clone.setInputAxesAttr(builder.getArrayAttr(perInput));
    local[norm.getResult()] = clone.getResult();
    layouts[norm.getResult()].dims = {};
    return success();
  }
  if (auto ret = dyn_cast<func::ReturnOp>(op)) {
    SmallVector<Value> values;
    for (Value operand : ret.getOperands())
      values.push_back(reshard(
          operand,
          Dims(cast<ShapedType>(operand.getType()).getRank()), loc));
    builder.create<func::ReturnOp>(loc, values);
    return success();
  }
  auto rule = rules.find(op);
  if (rule == rules.end())
    return op->emitOpError() << "has no sharding rule to partition it by";
  return partitionRuled(op, rule->second);
}

/// The axes the experts of an ExpertsOp or ExpertsGradOp are split over.
DimAxes Partitioner::expertAxesOf(Operation *op, const ShardingRule &rule) {
  unsigned expertFactor = rule.getOperands()[4][0].front();
  return factorAxes(op, rule)[expertFactor];
}

/// An FP8 amax history is split like the experts it belongs to, so each
/// rank holds the histories of its own experts. Set before the parameters
/// turn local.
LogicalResult Partitioner::shardFp8Histories() {
  for (auto [op, rule] : rules) {
    auto history = op->getAttrOfType<FlatSymbolRefAttr>("fp8_history");
    if (!history || !isa<ExpertsOp, ExpertsGradOp>(op))
      continue;
    auto param = symbols.lookup<ParamOp>(history.getAttr());
    SmallVector<SmallVector<StringRef>> dims(param.getTensorType().getRank());
    dims[0] = SmallVector<StringRef>(expertAxesOf(op, rule));
    auto sharding = ShardingAttr::get(meshRef, dims);
    if (param.getShardingAttr() && param.getShardingAttr() != sharding)
      return op->emitOpError()
             << "splits its experts unlike another user of " << history
             << ", which holds " << param.getShardingAttr();
    param.setShardingAttr(sharding);
  }
  return success();
}

void Partitioner::localizeParams() {
  for (ParamOp param : module.getOps<ParamOp>()) {
    if (!param.getSharding())
      continue;
    param.setType(localType(param.getTensorType(),
                            dimsOf(*param.getSharding())));
  }
}

LogicalResult Partitioner::run() {
  Block &body = step.getBody().front();
  // Rules read shapes, so they are taken before anything turns local.
  for (Operation &op : body)
    if (auto ruled = dyn_cast<ShardingRuleOpInterface>(op)) {
      FailureOr<ShardingRule> rule = ruled.getShardingRule();
      if (failed(rule))
        return failure();
      rules.try_emplace(&op, std::move(*rule));
    }
  // Inputs arrive split as recorded (each rank loads its rows); their
  // local types come first, as reshards derive shapes from them.
  for (BlockArgument arg : body.getArguments()) {
    ShardingAttr sharding = getRecordedSharding(arg);
    Dims dims = sharding ? dimsOf(sharding)
                         : Dims(cast<ShapedType>(arg.getType()).getRank());
    layouts[arg].dims = dims;
    local[arg] = arg;
    globalTypes[arg] = arg.getType();
    arg.setType(localType(arg.getType(), dims));
  }
  SmallVector<Operation *> original;
  for (Operation &op : body)
    original.push_back(&op);
  // Local parameter types first: get_param of a localized parameter reads
  // its local block.
  if (failed(shardFp8Histories()))
    return failure();
  localizeParams();
  for (Operation *op : original)
    if (failed(partitionOp(op)))
      return failure();
  for (Operation *op : llvm::reverse(original)) {
    op->dropAllUses();
    op->erase();
  }
  step.setType(FunctionType::get(
      step.getContext(), body.getArgumentTypes(),
      body.getTerminator()->getOperandTypes()));
  return success();
}

namespace {
struct PartitionPass
    : public mlir::moe::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = getMesh(module);
    if (!mesh) {
      module.emitError() << "expected exactly one moe.mesh to partition over";
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to partition");
    if (failed(step) || failed(Partitioner(module, *step, mesh).run()))
      return signalPassFailure();
    module->setAttr(kPartitionedAttrName, UnitAttr::get(module.getContext()));
  }
};
} // namespace
