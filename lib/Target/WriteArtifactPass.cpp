//===- WriteArtifactPass.cpp - moe-write-artifact -------------------------===//
#include "moe/Target/ArtifactWriter.h"
#include "moe/Target/Passes.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Target.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::moe {
#define GEN_PASS_DEF_WRITEARTIFACT
#include "moe/Target/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct WriteArtifactPass
    : public mlir::moe::impl::WriteArtifactBase<WriteArtifactPass> {
  using WriteArtifactBase::WriteArtifactBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    markAllAnalysesPreserved();
    if (output.empty()) {
      module.emitError() << "moe-write-artifact needs an output file";
      return signalPassFailure();
    }
    if (!lookupTarget(target)) {
      module.emitError() << "moe-write-artifact: unknown target '" << target
                         << "': expected " << knownTargetList();
      return signalPassFailure();
    }
    FailureOr<std::optional<RecordedPipeline>> pipeline =
        recordedPipeline(module);
    if (failed(pipeline))
      return signalPassFailure();
    std::string error;
    auto file = openOutputFile(output, &error);
    if (!file) {
      module.emitError() << error;
      return signalPassFailure();
    }
    if (failed(writeArtifact(module, function, seed, file->os(),
                             *pipeline ? &(*pipeline)->schedule : nullptr,
                             target)))
      return signalPassFailure();
    file->keep();
  }
};
} // namespace
