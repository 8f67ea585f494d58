//===- ShardingPropagation.cpp - op-agnostic propagation over factors -----===//
//
// Every tensor dimension starts open. Seeds close some: moe.shard pins
// (priority 0), the batch (1), parameter storage (2). Then, until nothing
// changes, each op projects the closed dimensions of its operands and
// results onto its factors (ShardingRule.h), keeps for every factor the
// longest prefix of the strongest source's axes that does not clash with
// axes already given to a factor it shares a tensor with (a residual
// stream split {cp, tp} gives a column-parallel linear's tokens cp, its
// features tp), and projects the factors back onto its
// open dimensions. Pinned factors never take axes; an axis splits at most
// one dimension of a tensor; a dimension takes the axes of its outermost
// factor only when they divide it. What stays open is replicated.
//
// A closed dimension never changes, so the walk terminates; the reasons
// travel with the axes, so the report can say why every tensor is split.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallSet.h"

namespace mlir::moe {
#define GEN_PASS_DEF_PROPAGATESHARDING
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
/// What propagation knows of one value.
struct ValueState {
  /// Per dimension: nullopt while open, else the axes (empty: whole).
  SmallVector<std::optional<SmallVector<StringRef>>> dims;
  /// Per dimension: the strength of its source (lower wins) and why.
  SmallVector<int> priority;
  SmallVector<std::string> why;
};

class Propagation {
public:
  Propagation(func::FuncOp step, MeshOp mesh)
      : step(step), mesh(mesh),
        symbols(step->getParentOfType<ModuleOp>()) {}

  void seed();
  bool visit(Operation *op, const ShardingRule &rule);
  LogicalResult run();
  void record();

private:
  ValueState &state(Value value) {
    auto [it, inserted] = states.try_emplace(value);
    if (inserted) {
      int64_t rank = cast<ShapedType>(value.getType()).getRank();
      it->second.dims.resize(rank);
      it->second.priority.assign(rank, 100);
      it->second.why.resize(rank);
    }
    return it->second;
  }
  void close(Value value, ShardingAttr sharding, int priority, StringRef why);
  bool project(Value value, const ShardingRule::TensorFactors &dims,
               ArrayRef<SmallVector<StringRef>> factorAxes,
               ArrayRef<int> factorPriority, ArrayRef<std::string> factorWhy,
               Operation *op);

  func::FuncOp step;
  MeshOp mesh;
  /// The module's symbols, looked up once each.
  SymbolTable symbols;
  llvm::DenseMap<Value, ValueState> states;
};
} // namespace

void Propagation::close(Value value, ShardingAttr sharding, int priority,
                        StringRef why) {
  ValueState &s = state(value);
  for (unsigned d = 0; d < s.dims.size(); ++d) {
    s.dims[d] = sharding.axesOf(d);
    s.priority[d] = priority;
    s.why[d] = why.str();
  }
}

void Propagation::seed() {
  for (BlockArgument arg : step.getArguments()) {
    unsigned index = arg.getArgNumber();
    auto sharding =
        step.getArgAttrOfType<ShardingAttr>(index, kShardingAttrName);
    if (!sharding)
      continue;
    // A sharding written on an argument by hand may come without a reason.
    auto why =
        step.getArgAttrOfType<StringAttr>(index, kShardingOriginAttrName);
    close(arg, sharding, /*priority=*/1,
          why ? why.getValue() : StringRef("argument annotation"));
  }
  step.walk([&](Operation *op) {
    if (auto seed = op->getAttrOfType<ShardingAttr>(kShardingSeedAttrName)) {
      close(op->getResult(0), seed, /*priority=*/3, "policy seed");
      // One reason per dimension.
      if (auto whys =
              op->getAttrOfType<ArrayAttr>(kShardingSeedOriginAttrName)) {
        ValueState &s = state(op->getResult(0));
        for (auto [d, why] : llvm::enumerate(whys.getAsValueRange<StringAttr>()))
          if (d < s.why.size())
            s.why[d] = why.str();
      }
      op->removeAttr(kShardingSeedAttrName);
      op->removeAttr(kShardingSeedOriginAttrName);
      return;
    }
    if (auto pin = dyn_cast<ShardOp>(op)) {
      close(pin.getResult(), pin.getSharding(), /*priority=*/0, "user pin");
    } else if (auto read = dyn_cast<GetParamOp>(op)) {
      auto param = symbols.lookup<ParamOp>(read.getParamAttr().getAttr());
      if (!param || !param.getSharding())
        return;
      // FSDP splits storage only: a weight is gathered over fsdp before
      // use, so fsdp must not steer how the computation is split.
      ShardingAttr storage = *param.getSharding();
      auto origins =
          param->getAttrOfType<ArrayAttr>(kParamShardingOriginAttrName);
      ValueState &s = state(read.getResult());
      for (unsigned d = 0; d < s.dims.size(); ++d) {
        SmallVector<StringRef> axes;
        for (StringRef axis : storage.axesOf(d))
          if (axis != kFsdpAxis)
            axes.push_back(axis);
        s.dims[d] = axes;
        s.priority[d] = /*parameter storage=*/2;
        StringRef why = origins && d < origins.size()
                            ? cast<StringAttr>(origins[d]).getValue()
                            : "";
        s.why[d] = (why + " (" + param.getSymName() + ")").str();
      }
    }
  });
}

bool Propagation::project(Value value, const ShardingRule::TensorFactors &dims,
                          ArrayRef<SmallVector<StringRef>> factorAxes,
                          ArrayRef<int> factorPriority,
                          ArrayRef<std::string> factorWhy, Operation *op) {
  ValueState &s = state(value);
  llvm::SmallSet<StringRef, 8> used;
  for (const auto &dim : s.dims)
    if (dim)
      used.insert(dim->begin(), dim->end());
  auto shaped = cast<ShapedType>(value.getType());
  bool changed = false;
  for (unsigned d = 0; d < dims.size(); ++d) {
    if (s.dims[d] || dims[d].empty())
      continue;
    unsigned outer = dims[d].front();
    ArrayRef<StringRef> axes = factorAxes[outer];
    if (axes.empty())
      continue;
    int64_t parts = 1;
    bool clash = false;
    for (StringRef axis : axes) {
      parts *= *mesh.getAxisSize(axis);
      clash |= used.contains(axis);
    }
    if (clash || shaped.getDimSize(d) % parts != 0)
      continue;
    s.dims[d] = SmallVector<StringRef>(axes);
    used.insert(axes.begin(), axes.end());
    s.priority[d] = factorPriority[outer];
    s.why[d] = factorWhy[outer];
    changed = true;
  }
  return changed;
}

SmallVector<StringRef>
mlir::moe::clashFreePrefix(ArrayRef<StringRef> axes,
                           const llvm::SmallSet<unsigned, 8> &together,
                           ArrayRef<SmallVector<StringRef>> factorAxes) {
  SmallVector<StringRef> prefix;
  for (StringRef axis : axes) {
    if (llvm::any_of(together, [&](unsigned g) {
          return llvm::is_contained(factorAxes[g], axis);
        }))
      break;
    prefix.push_back(axis);
  }
  return prefix;
}

bool Propagation::visit(Operation *op, const ShardingRule &rule) {
  ArrayRef<ShardingRule::Factor> factors = rule.getFactors();
  // Factors sharing a tensor cannot take the same axis.
  SmallVector<llvm::SmallSet<unsigned, 8>> together = rule.coOccurringFactors();
  auto tensors = llvm::concat<const ShardingRule::TensorFactors>(
      rule.getOperands(), rule.getResults());

  // Candidates: the closed, split dimensions of operands and results.
  struct Candidate {
    int priority;
    unsigned factor;
    SmallVector<StringRef> axes;
    // A copy: the state map may grow (and move) while projecting.
    std::string why;
  };
  SmallVector<Candidate> candidates;
  auto values = llvm::concat<Value>(SmallVector<Value>(op->getOperands()),
                                    SmallVector<Value>(op->getResults()));
  for (auto [value, dims] : llvm::zip(values, tensors)) {
    auto it = states.find(value);
    if (it == states.end())
      continue;
    const ValueState &s = it->second;
    for (unsigned d = 0; d < dims.size(); ++d)
      if (s.dims[d] && !s.dims[d]->empty() && !dims[d].empty())
        candidates.push_back(
            {s.priority[d], dims[d].front(), *s.dims[d], s.why[d]});
  }
  llvm::stable_sort(candidates, [](const Candidate &a, const Candidate &b) {
    return a.priority < b.priority;
  });
  SmallVector<SmallVector<StringRef>> factorAxes(factors.size());
  SmallVector<int> factorPriority(factors.size(), 100);
  SmallVector<std::string> factorWhy(factors.size());
  for (const Candidate &c : candidates) {
    if (factors[c.factor].pinned || !factorAxes[c.factor].empty())
      continue;
    SmallVector<StringRef> usable =
        clashFreePrefix(c.axes, together[c.factor], factorAxes);
    if (usable.empty())
      continue;
    factorAxes[c.factor] = usable;
    factorPriority[c.factor] = c.priority;
    factorWhy[c.factor] = c.why;
  }

  bool changed = false;
  for (auto [value, dims] : llvm::zip(values, tensors))
    changed |= project(value, dims, factorAxes, factorPriority, factorWhy, op);
  return changed;
}

LogicalResult Propagation::run() {
  seed();
  SmallVector<std::pair<Operation *, ShardingRule>> ops;
  for (Operation &op : step.getBody().front()) {
    auto ruled = dyn_cast<ShardingRuleOpInterface>(op);
    // Parameter reads and pins are seeds; nothing flows into them.
    if (!ruled || isa<GetParamOp, ShardOp>(op))
      continue;
    FailureOr<ShardingRule> rule = ruled.getShardingRule();
    if (failed(rule))
      return failure();
    ops.emplace_back(&op, std::move(*rule));
  }
  // Forward and backward sweeps until a fixed point.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto &[op, rule] : ops)
      changed |= visit(op, rule);
    for (auto &[op, rule] : llvm::reverse(ops))
      changed |= visit(op, rule);
  }
  return success();
}

void Propagation::record() {
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  MLIRContext *ctx = step.getContext();
  auto finish = [&](Value value) {
    ValueState &s = state(value);
    SmallVector<SmallVector<StringRef>> dims;
    for (auto &dim : s.dims)
      dims.push_back(dim ? *dim : SmallVector<StringRef>());
    ShardingAttr sharding = ShardingAttr::get(meshRef, dims);
    // The reasons of the split dimensions, one each.
    std::string why;
    for (unsigned d = 0; d < dims.size(); ++d) {
      if (dims[d].empty())
        continue;
      why += (why.empty() ? "" : "; ") + ("dim " + Twine(d) + ": ").str() +
             s.why[d];
    }
    if (why.empty())
      why = "replicated";
    return std::make_pair(sharding, StringAttr::get(ctx, why));
  };
  for (BlockArgument arg : step.getArguments()) {
    auto [sharding, why] = finish(arg);
    step.setArgAttr(arg.getArgNumber(), kShardingAttrName, sharding);
    step.setArgAttr(arg.getArgNumber(), kShardingOriginAttrName, why);
  }
  step.walk([&](Operation *op) {
    if (op->getNumResults() == 0)
      return;
    SmallVector<Attribute> shardings, whys;
    for (Value result : op->getResults()) {
      auto [sharding, why] = finish(result);
      shardings.push_back(sharding);
      whys.push_back(why);
    }
    op->setAttr(kShardingAttrName, ArrayAttr::get(ctx, shardings));
    op->setAttr(kShardingOriginAttrName, ArrayAttr::get(ctx, whys));
  });
}

LogicalResult mlir::moe::propagateShardings(func::FuncOp step, MeshOp mesh) {
  if (!step.getBody().hasOneBlock())
    return step.emitOpError() << "expected a single-block function";
  Propagation propagation(step, mesh);
  if (failed(propagation.run()))
    return failure();
  propagation.record();
  return success();
}

ShardingAttr mlir::moe::getRecordedSharding(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto function = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    return function ? function.getArgAttrOfType<ShardingAttr>(
                          arg.getArgNumber(), kShardingAttrName)
                    : ShardingAttr();
  }
  auto all = value.getDefiningOp()->getAttrOfType<ArrayAttr>(kShardingAttrName);
  if (!all)
    return {};
  return dyn_cast<ShardingAttr>(
      all[cast<OpResult>(value).getResultNumber()]);
}

StringRef mlir::moe::getRecordedShardingOrigin(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto function = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto why = function ? function.getArgAttrOfType<StringAttr>(
                              arg.getArgNumber(), kShardingOriginAttrName)
                        : StringAttr();
    return why ? why.getValue() : "";
  }
  auto all =
      value.getDefiningOp()->getAttrOfType<ArrayAttr>(kShardingOriginAttrName);
  if (!all)
    return "";
  return cast<StringAttr>(all[cast<OpResult>(value).getResultNumber()])
      .getValue();
}

namespace {
struct PropagateShardingPass
    : public mlir::moe::impl::PropagateShardingBase<PropagateShardingPass> {
  using PropagateShardingBase::PropagateShardingBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp meshOp = getMesh(module);
    if (!meshOp) {
      module.emitError() << "expected exactly one moe.mesh to shard over "
                            "(moec --mesh dp=2,tp=2)";
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to shard");
    std::vector<std::string> fold(foldExperts.begin(), foldExperts.end());
    if (failed(step) ||
        failed(seedShardings(module, *step, meshOp, fold, zeroOne)) ||
        failed(propagateShardings(*step, meshOp)))
      return signalPassFailure();
  }
};
} // namespace
