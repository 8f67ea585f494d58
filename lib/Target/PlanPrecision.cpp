//===- PlanPrecision.cpp - the bytes of a plan's precision ----------------===//
//
// `moec --plan` predicts a step compiled in the precision the compile will
// use (docs/precision.md): the bytes per parameter and per activation come
// from that recipe, not from assumed constants, so that the plan's memory
// and message sizes are those of the program moec writes.
//
//===----------------------------------------------------------------------===//
#include "moe/Target/Planner.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;

SoftwareTraits mlir::moe::withPrecision(SoftwareTraits software,
                                        const PrecisionRecipe &recipe) {
  // The GEMMs read the working copy where there is one, else the master;
  // the master then counts with the moments as optimizer state.
  software.weightBytes = recipe.isMixed() ? recipe.workingCopyBytes()
                                          : recipe.masterBytes();
  software.optimizerBytes =
      recipe.momentBytes() + (recipe.isMixed() ? recipe.masterBytes() : 0);
  software.gradientBytes = recipe.gradientBytes();
  software.activationBytes = recipe.activationBytes();
  software.precision = recipe;
  return software;
}

double SoftwareTraits::optimizerStreamBytes() const {
  if (precision)
    return 2.0 * (precision->masterBytes() + precision->momentBytes()) +
           precision->gradientBytes() + precision->workingCopyBytes();
  // Another software's bytes: it reads and writes its weights and state
  // and reads the gradient.
  return 2 * weightBytes + gradientBytes + 2 * optimizerBytes;
}

std::string mlir::moe::describeBytes(const SoftwareTraits &software) {
  if (const std::optional<PrecisionRecipe> &recipe = software.precision) {
    std::string text = recipe->describe() + ": per parameter " +
                       std::to_string(recipe->masterBytes()) + " master + " +
                       std::to_string(recipe->momentBytes()) + " moments + ";
    if (recipe->isMixed())
      text += std::to_string(recipe->workingCopyBytes()) + " working copy + ";
    return text +
           llvm::formatv("{0} gradient = {1} bytes; activations and "
                         "messages {2} bytes per element",
                         recipe->gradientBytes(), recipe->bytesPerParameter(),
                         recipe->activationBytes())
               .str();
  }
  return llvm::formatv("bytes as given: per parameter {0} weight + {1} "
                       "optimizer state + {2} gradient; activations and "
                       "messages {3} per element",
                       software.weightBytes, software.optimizerBytes,
                       software.gradientBytes, software.activationBytes)
      .str();
}
