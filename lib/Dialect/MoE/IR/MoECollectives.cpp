//===- MoECollectives.cpp - verifiers of the collective ops ---------------===//
#include "GroupSize.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::moe;

/// The number of ranks in a group over `axes` of the op's mesh, after
/// checking that the mesh exists and has each axis once.
FailureOr<int64_t> mlir::moe::groupSize(Operation *op,
                                        FlatSymbolRefAttr meshRef,
                                        ArrayAttr axes,
                                        SymbolTableCollection &symbols) {
  auto mesh = symbols.lookupNearestSymbolFrom<MeshOp>(op, meshRef);
  if (!mesh)
    return op->emitOpError() << meshRef << " does not name a moe.mesh";
  llvm::SmallSet<StringRef, 4> seen;
  int64_t size = 1;
  for (StringRef axis : axes.getAsValueRange<StringAttr>()) {
    std::optional<int64_t> axisSize = mesh.getAxisSize(axis);
    if (!axisSize)
      return op->emitOpError() << "mesh " << meshRef << " has no axis '"
                               << axis << "'";
    if (!seen.insert(axis).second)
      return op->emitOpError() << "axis '" << axis << "' is listed twice";
    size *= *axisSize;
  }
  return size;
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return groupSize(*this, getMeshAttr(), getAxes(), symbols);
}

/// Input and result agree except along `dim`, where `large` = `small` times
/// the group size.
static LogicalResult verifyBlockShapes(Operation *op, int64_t dim,
                                       ShapedType small, ShapedType large,
                                       int64_t group, StringRef largeName) {
  for (int64_t d = 0; d < small.getRank(); ++d) {
    int64_t expected = small.getDimSize(d) * (d == dim ? group : 1);
    if (large.getDimSize(d) != expected)
      return op->emitOpError()
             << "expected dimension " << d << " of the " << largeName
             << " to be " << expected << ", got " << large.getDimSize(d);
  }
  return success();
}

template <typename Op>
static LogicalResult verifyCollective(Op op) {
  auto input = cast<ShapedType>(op.getInput().getType());
  auto result = cast<ShapedType>(op.getResult().getType());
  if (static_cast<int64_t>(op.getDim()) >= input.getRank() ||
      input.getRank() != result.getRank())
    return op.emitOpError() << "expected dim " << op.getDim()
                            << " within the input's rank " << input.getRank()
                            << " and input and result of one rank";
  return success();
}

LogicalResult AllGatherOp::verify() { return verifyCollective(*this); }
LogicalResult ReduceScatterOp::verify() { return verifyCollective(*this); }
LogicalResult SliceOp::verify() { return verifyCollective(*this); }

/// Checks the group, then that one side is the other's block along `dim`:
/// the input for gathers (`gathers`), the result for scatters and slices.
template <typename Op>
static LogicalResult verifyBlocks(Op op, SymbolTableCollection &symbols,
                                  bool gathers) {
  FailureOr<int64_t> group =
      groupSize(op, op.getMeshAttr(), op.getAxes(), symbols);
  if (failed(group))
    return failure();
  auto input = cast<ShapedType>(op.getInput().getType());
  auto result = cast<ShapedType>(op.getResult().getType());
  return gathers ? verifyBlockShapes(op, op.getDim(), input, result, *group,
                                     "result")
                 : verifyBlockShapes(op, op.getDim(), result, input, *group,
                                     "input");
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyBlocks(*this, symbols, /*gathers=*/true);
}

LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyBlocks(*this, symbols, /*gathers=*/false);
}

LogicalResult SliceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyBlocks(*this, symbols, /*gathers=*/false);
}

LogicalResult
Fp8AmaxUpdateOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto history = symbols.lookupNearestSymbolFrom<ParamOp>(*this, getHistoryAttr());
  if (!history || history.getKind() != ParamKind::fp8_history)
    return emitOpError() << getHistoryAttr()
                         << " does not name a moe.param of kind fp8_history";
  if (static_cast<bool>(getMeshAttr()) != static_cast<bool>(getAxesAttr()))
    return emitOpError() << "expected mesh and axes together";
  if (!getMeshAttr())
    return success();
  return groupSize(*this, getMeshAttr(), *getAxes(), symbols);
}

LogicalResult ReduceBucketOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "expected at least one input";
  if (getInputs().size() != getResults().size())
    return emitOpError() << "expected one result per input, got "
                         << getResults().size() << " for "
                         << getInputs().size();
  Type element = getElementTypeOrSelf(getInputs().front().getType());
  for (auto [index, value] : llvm::enumerate(getInputs()))
    if (getElementTypeOrSelf(value.getType()) != element ||
        getElementTypeOrSelf(getResult(index).getType()) != element)
      return emitOpError() << "expected every input and result of element "
                           << "type " << element << ", input " << index
                           << " or its result is not";
  return success();
}

LogicalResult ReduceBucketOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> group =
      groupSize(*this, getMeshAttr(), getAxes(), symbols);
  if (failed(group))
    return failure();
  for (auto [index, pair] :
       llvm::enumerate(llvm::zip(getInputs(), getResults()))) {
    auto input = cast<ShapedType>(std::get<0>(pair).getType());
    auto result = cast<ShapedType>(std::get<1>(pair).getType());
    if (!getScatter()) {
      if (input != result)
        return emitOpError()
               << "expected result " << index << " of its input's type "
               << input << ", got " << result;
      continue;
    }
    if (input.getRank() == 0 || input.getRank() != result.getRank())
      return emitOpError() << "expected input " << index
                           << " and its result of one rank, at least 1";
    if (failed(verifyBlockShapes(*this, 0, result, input, *group, "input")))
      return failure();
  }
  return success();
}
