//===- MoESharding.cpp - meshes, shardings and sharding pins --------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::moe;

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

SmallVector<StringRef> ShardingAttr::axesOf(unsigned dim) const {
  SmallVector<StringRef> axes;
  for (Attribute axis : llvm::cast<ArrayAttr>(getDims()[dim]))
    axes.push_back(llvm::cast<StringAttr>(axis).getValue());
  return axes;
}

ShardingAttr ShardingAttr::get(FlatSymbolRefAttr mesh,
                               ArrayRef<SmallVector<StringRef>> dims) {
  Builder b(mesh.getContext());
  SmallVector<Attribute> entries;
  for (const SmallVector<StringRef> &axes : dims)
    entries.push_back(b.getStrArrayAttr(axes));
  return ShardingAttr::get(mesh.getContext(), mesh, b.getArrayAttr(entries));
}

ShardingAttr ShardingAttr::getReplicated(FlatSymbolRefAttr mesh,
                                         unsigned rank) {
  return get(mesh, SmallVector<SmallVector<StringRef>>(rank));
}

bool ShardingAttr::isReplicated() const {
  return llvm::all_of(getDims(), [](Attribute dim) {
    return llvm::cast<ArrayAttr>(dim).empty();
  });
}

LogicalResult
ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     FlatSymbolRefAttr mesh, ArrayAttr dims) {
  llvm::SmallSet<StringRef, 8> seen;
  for (Attribute dim : dims) {
    auto axes = llvm::dyn_cast<ArrayAttr>(dim);
    if (!axes)
      return emitError() << "expected a list of axes per dimension";
    for (Attribute axis : axes) {
      auto name = llvm::dyn_cast<StringAttr>(axis);
      if (!name || name.getValue().empty())
        return emitError() << "expected non-empty axis names";
      if (!isKnownMeshAxis(name.getValue()))
        return emitError() << unknownMeshAxisMessage(name.getValue());
      if (!seen.insert(name.getValue()).second)
        return emitError() << "axis '" << name.getValue()
                           << "' splits more than one dimension";
    }
  }
  return success();
}

/// `{dp, ep}` or `{}`: the axes of one dimension.
static ParseResult parseAxes(AsmParser &parser, SmallVector<Attribute> &axes) {
  if (parser.parseLBrace())
    return failure();
  if (succeeded(parser.parseOptionalRBrace()))
    return success();
  do {
    std::string name;
    if (parser.parseKeywordOrString(&name))
      return failure();
    axes.push_back(parser.getBuilder().getStringAttr(name));
  } while (succeeded(parser.parseOptionalComma()));
  return parser.parseRBrace();
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  FlatSymbolRefAttr mesh;
  SmallVector<Attribute> dims;
  auto parseDim = [&]() -> ParseResult {
    SmallVector<Attribute> axes;
    if (parseAxes(parser, axes))
      return failure();
    dims.push_back(parser.getBuilder().getArrayAttr(axes));
    return success();
  };
  if (parser.parseLess() || parser.parseAttribute(mesh) ||
      parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseDim) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(parser.getContext(), mesh,
                                         parser.getBuilder().getArrayAttr(dims));
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getMesh() << ", [";
  llvm::interleaveComma(getDims(), printer, [&](Attribute dim) {
    printer << "{";
    llvm::interleaveComma(llvm::cast<ArrayAttr>(dim), printer, [&](Attribute axis) {
      printer.printKeywordOrString(llvm::cast<StringAttr>(axis).getValue());
    });
    printer << "}";
  });
  printer << "]>";
}

LogicalResult mlir::moe::verifySharding(Operation *op, ShardingAttr sharding,
                                        Type type,
                                        SymbolTableCollection &symbols,
                                        bool typeIsLocal) {
  auto mesh = symbols.lookupNearestSymbolFrom<MeshOp>(op, sharding.getMesh());
  if (!mesh)
    return op->emitOpError() << "sharding names " << sharding.getMesh()
                             << ", which is not a moe.mesh";
  auto shaped = cast<ShapedType>(type);
  if (static_cast<int64_t>(sharding.getDims().size()) != shaped.getRank())
    return op->emitOpError() << "sharding has " << sharding.getDims().size()
                             << " dimensions, the tensor " << shaped.getRank();
  for (int64_t dim = 0; dim < shaped.getRank(); ++dim) {
    int64_t parts = 1;
    for (StringRef axis : sharding.axesOf(dim)) {
      std::optional<int64_t> size = mesh.getAxisSize(axis);
      if (!size)
        return op->emitOpError() << "sharding uses axis '" << axis
                                 << "', which mesh " << sharding.getMesh()
                                 << " does not have";
      parts *= *size;
    }
    if (!typeIsLocal && shaped.getDimSize(dim) % parts != 0)
      return op->emitOpError()
             << "dimension " << dim << " of size " << shaped.getDimSize(dim)
             << " cannot be split " << parts << " ways";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

bool mlir::moe::isKnownMeshAxis(StringRef name) {
  return llvm::is_contained(kMeshAxes, name);
}

std::string mlir::moe::unknownMeshAxisMessage(StringRef name) {
  std::string known;
  for (auto [i, axis] : llvm::enumerate(kMeshAxes))
    known += (i == 0 ? "" : i + 1 == std::size(kMeshAxes) ? " and " : ", ") +
             axis.str();
  if (name == kPipelineAxis)
    return ("axis '" + name + "' is not a mesh axis: pipeline stages come "
            "from --pp (e.g. --pp 2); mesh axes are " + known)
        .str();
  return ("unknown axis '" + name + "': moec implements " + known +
          " (pipeline stages: --pp)")
      .str();
}

int64_t MeshOp::getNumRanks() {
  int64_t ranks = 1;
  for (int64_t size : getShape())
    ranks *= size;
  return ranks;
}

std::optional<int64_t> MeshOp::getAxisSize(StringRef name) {
  for (auto [axis, size] : llvm::zip(getAxes(), getShape()))
    if (cast<StringAttr>(axis).getValue() == name)
      return size;
  return std::nullopt;
}

LogicalResult MeshOp::verify() {
  if (getAxes().empty())
    return emitOpError() << "expected at least one axis";
  if (getAxes().size() != getShape().size())
    return emitOpError() << "expected one size per axis";
  llvm::SmallSet<StringRef, 8> seen;
  int64_t ranks = 1;
  for (auto [axis, size] : llvm::zip(getAxes(), getShape())) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (name.empty())
      return emitOpError() << "expected non-empty axis names";
    if (!seen.insert(name).second)
      return emitOpError() << "axis '" << name << "' is listed twice";
    if (!isKnownMeshAxis(name))
      return emitOpError() << unknownMeshAxisMessage(name);
    if (size <= 0)
      return emitOpError() << "expected axis '" << name
                           << "' to have a positive size, got " << size;
    if (size > kMaxMeshRanks / ranks)
      return emitOpError() << "expected at most " << kMaxMeshRanks
                           << " ranks, got more at axis '" << name << "'";
    ranks *= size;
  }
  return success();
}

ParseResult MeshOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  SmallVector<Attribute> axes;
  SmallVector<int64_t> shape;
  auto parseAxis = [&]() -> ParseResult {
    std::string axis;
    int64_t size;
    if (parser.parseKeywordOrString(&axis) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    axes.push_back(parser.getBuilder().getStringAttr(axis));
    shape.push_back(size);
    return success();
  };
  if (parser.parseSymbolName(name, getSymNameAttrName(result.name),
                             result.attributes) ||
      parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Paren,
                                     parseAxis) ||
      parser.parseOptionalAttrDict(result.attributes))
    return failure();
  Builder &b = parser.getBuilder();
  result.addAttribute(getAxesAttrName(result.name), b.getArrayAttr(axes));
  result.addAttribute(getShapeAttrName(result.name),
                      b.getDenseI64ArrayAttr(shape));
  return success();
}

void MeshOp::print(OpAsmPrinter &printer) {
  printer << " ";
  printer.printSymbolName(getSymName());
  printer << "(";
  llvm::interleaveComma(llvm::zip(getAxes(), getShape()), printer,
                        [&](auto entry) {
                          auto [axis, size] = entry;
                          printer.printKeywordOrString(
                              cast<StringAttr>(axis).getValue());
                          printer << " = " << size;
                        });
  printer << ")";
  printer.printOptionalAttrDict((*this)->getAttrs(),
                                {getSymNameAttrName(), getAxesAttrName(),
                                 getShapeAttrName()});
}

//===----------------------------------------------------------------------===//
// ShardOp and parameter shardings
//===----------------------------------------------------------------------===//

LogicalResult ShardOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifySharding(*this, getSharding(), getType(), symbols);
}

SmallVector<Value> ShardOp::buildVJP(OpBuilder &builder,
                                     ValueRange resultGrads) {
  // The gradient of a pinned value is pinned the same way.
  return {builder.create<ShardOp>(getLoc(), resultGrads[0], getSharding())};
}

LogicalResult ParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(verifyMaster(symbols)))
    return failure();
  if (!getSharding())
    return success();
  auto module = (*this)->getParentOfType<ModuleOp>();
  bool local = module && module->hasAttr(kPartitionedAttrName);
  return verifySharding(*this, *getSharding(), getType(), symbols, local);
}
