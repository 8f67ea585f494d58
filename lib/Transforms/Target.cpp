//===- Target.cpp - the known targets --------------------------------------===//
#include "moe/Transforms/Target.h"

using namespace mlir::moe;

llvm::ArrayRef<Target> mlir::moe::knownTargets() {
  static const Target kTargets[] = {
      {"cpu", 0, /*fp8Gemms=*/true}, // emulated
      {"a100", 80, /*fp8Gemms=*/false},
      {"h100", 90, /*fp8Gemms=*/true},
      {"h200", 90, /*fp8Gemms=*/true},
  };
  return kTargets;
}

const Target *mlir::moe::lookupTarget(llvm::StringRef name) {
  for (const Target &target : knownTargets())
    if (target.name == name)
      return &target;
  return nullptr;
}
