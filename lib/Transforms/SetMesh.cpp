//===- SetMesh.cpp - moe-set-mesh: the mesh from a spec -------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Sharding.h"

namespace mlir::moe {
#define GEN_PASS_DEF_SETMESH
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct SetMeshPass : public mlir::moe::impl::SetMeshBase<SetMeshPass> {
  using SetMeshBase::SetMeshBase;
  void runOnOperation() override {
    std::string error;
    auto axes = parseMeshSpec(mesh, error);
    if (failed(axes)) {
      getOperation().emitError() << "mesh: " << error;
      return signalPassFailure();
    }
    setMesh(getOperation(), *axes);
  }
};
} // namespace
