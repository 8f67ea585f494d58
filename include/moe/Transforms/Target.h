//===- Target.h - what the compiler knows of the hardware -------*- C++ -*-===//
//
// The targets `moec --target` accepts and the facts the passes decide by.
// Today that is FP8: GPUs before sm_89 have no FP8 tensor cores, so there FP8
// can only shrink what is stored or sent, not speed up a GEMM. The planner's
// hardware descriptions (peak FLOP/s, bandwidths, memory) will extend this.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_TARGET_H
#define MOE_TRANSFORMS_TARGET_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace mlir::moe {

struct Target {
  llvm::StringRef name;
  /// The CUDA compute capability times ten (90 for sm_90); 0 for the CPU.
  int computeCapability;
  /// Whether GEMMs can read FP8 (E4M3/E5M2) inputs: sm_89 and newer. The
  /// CPU emulates them bit-exactly.
  bool fp8Gemms;
};

/// Every known target: cpu, a100, h100, h200.
llvm::ArrayRef<Target> knownTargets();

/// The target called `name`, or null.
const Target *lookupTarget(llvm::StringRef name);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_TARGET_H
