//===- ArtifactWriter.h - write a training step as a .moebin ----*- C++ -*-===//
#ifndef MOE_TARGET_ARTIFACTWRITER_H
#define MOE_TARGET_ARTIFACTWRITER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::moe {

/// Writes `function` (a planned train_step) and the module's parameters in
/// the runtime's artifact format; `seed` seeds parameter initialisation.
LogicalResult writeArtifact(ModuleOp module, StringRef function, uint64_t seed,
                            llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_ARTIFACTWRITER_H
