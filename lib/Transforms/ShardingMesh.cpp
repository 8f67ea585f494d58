//===- ShardingMesh.cpp - the mesh of a module and per-rank shapes --------===//
#include "moe/Transforms/Sharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::moe;

FailureOr<std::vector<std::pair<std::string, int64_t>>>
mlir::moe::parseMeshSpec(StringRef spec, std::string &error) {
  std::vector<std::pair<std::string, int64_t>> axes;
  llvm::StringSet<> seen;
  int64_t ranks = 1;
  SmallVector<StringRef> entries;
  spec.split(entries, ',', -1, /*KeepEmpty=*/false);
  for (StringRef entry : entries) {
    auto [name, sizeText] = entry.split('=');
    name = name.trim();
    int64_t size = 0;
    if (name.empty() || sizeText.trim().getAsInteger(10, size) || size <= 0) {
      error = ("expected axis=size with a positive size, got '" + entry + "'")
                  .str();
      return failure();
    }
    if (!seen.insert(name).second) {
      error = ("axis '" + name + "' is given twice").str();
      return failure();
    }
    if (!isKnownMeshAxis(name)) {
      error = unknownMeshAxisMessage(name);
      return failure();
    }
    if (size > kMaxMeshRanks / ranks) {
      error = ("more than " + Twine(kMaxMeshRanks) + " ranks at axis '" +
               name + "'")
                  .str();
      return failure();
    }
    ranks *= size;
    axes.emplace_back(name.str(), size);
  }
  if (axes.empty()) {
    error = "expected at least one axis, e.g. dp=2,tp=2";
    return failure();
  }
  return axes;
}

MeshOp mlir::moe::setMesh(ModuleOp module,
                          ArrayRef<std::pair<std::string, int64_t>> axes) {
  for (MeshOp old : llvm::make_early_inc_range(module.getOps<MeshOp>()))
    old.erase();
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  SmallVector<StringRef> names;
  SmallVector<int64_t> shape;
  for (const auto &[name, size] : axes) {
    names.push_back(name);
    shape.push_back(size);
  }
  return builder.create<MeshOp>(module.getLoc(), "mesh",
                                builder.getStrArrayAttr(names),
                                builder.getDenseI64ArrayAttr(shape));
}

MeshOp mlir::moe::getMesh(ModuleOp module) {
  auto meshes = module.getOps<MeshOp>();
  if (meshes.empty() || std::next(meshes.begin()) != meshes.end())
    return nullptr;
  return *meshes.begin();
}

SmallVector<int64_t> mlir::moe::localShape(ShapedType type,
                                           ShardingAttr sharding,
                                           MeshOp mesh) {
  SmallVector<int64_t> shape(type.getShape());
  if (!sharding)
    return shape;
  for (unsigned dim = 0; dim < shape.size(); ++dim)
    for (StringRef axis : sharding.axesOf(dim))
      shape[dim] /= mesh.getAxisSize(axis).value_or(1);
  return shape;
}
