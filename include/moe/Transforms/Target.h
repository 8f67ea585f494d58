//===- Target.h - what the compiler knows of the hardware -------*- C++ -*-===//
//
// The targets `moec --target` accepts and the facts the passes decide by:
// each target's capability record (moe/Runtime/Capabilities.h), the table
// the runtime checks artifacts against too. GPUs before sm_89 have no FP8
// tensor cores, so there FP8 can only shrink what is stored or sent, not
// speed up a GEMM; a recipe a target's backend lacks is refused.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_TARGET_H
#define MOE_TRANSFORMS_TARGET_H

#include "moe/Runtime/Capabilities.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace mlir::moe {

struct Target {
  llvm::StringRef name;
  /// The CUDA compute capability times ten (90 for sm_90); 0 for the CPU.
  int computeCapability;
  /// What the target's backend runs.
  ::moe::caps::Capabilities capabilities;

  /// Whether GEMMs can read FP8 (E4M3/E5M2) inputs: sm_89 and newer. The
  /// CPU emulates them bit-exactly.
  bool fp8Gemms() const { return capabilities.fp8Gemms(); }
  /// Whether the expert GEMMs run the FP8 recipe called `recipe`
  /// ("tensorwise", "blockwise", "delayed").
  bool hasFp8Recipe(llvm::StringRef recipe) const;
  /// "cuda".
  llvm::StringRef backend() const {
    return llvm::StringRef(capabilities.backend.data(),
                           capabilities.backend.size());
  }
};

/// Every known target: cpu, a100, h100, h200.
llvm::ArrayRef<Target> knownTargets();

/// The target called `name`, or null.
const Target *lookupTarget(llvm::StringRef name);

/// "cpu, a100, h100 or h200", for errors.
std::string knownTargetList();

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_TARGET_H
