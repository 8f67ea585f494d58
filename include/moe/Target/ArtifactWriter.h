//===- ArtifactWriter.h - write a training step as a .moebin ----*- C++ -*-===//
#ifndef MOE_TARGET_ARTIFACTWRITER_H
#define MOE_TARGET_ARTIFACTWRITER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace moe::pipeline {
struct Schedule;
} // namespace moe::pipeline

namespace mlir::moe {

/// Writes `function` (a planned train_step) and the module's parameters in
/// the runtime's artifact format; `seed` seeds parameter initialisation.
/// With `schedule`, the step is one microbatch's, split by
/// moe-split-pipeline-stages, and the artifact runs it over the schedule's
/// microbatches and stages (the mesh gains axis "pp" first when there are
/// several). `target` (moec --target) is recorded for the runtime's
/// capability check.
LogicalResult writeArtifact(ModuleOp module, StringRef function, uint64_t seed,
                            llvm::raw_ostream &os,
                            const ::moe::pipeline::Schedule *schedule = nullptr,
                            StringRef target = "cpu");

} // namespace mlir::moe

#endif // MOE_TARGET_ARTIFACTWRITER_H
