//===- Target.cpp - the known targets --------------------------------------===//
#include "moe/Transforms/Target.h"

#include "llvm/ADT/STLExtras.h"

#include <vector>

using namespace mlir::moe;

llvm::ArrayRef<Target> mlir::moe::knownTargets() {
  static const std::vector<Target> kTargets = [] {
    std::vector<Target> targets;
    for (const ::moe::caps::Capabilities &record : ::moe::caps::kCapabilities)
      targets.push_back({llvm::StringRef(record.target.data(),
                                         record.target.size()),
                         record.computeCapability, record});
    return targets;
  }();
  return kTargets;
}

const Target *mlir::moe::lookupTarget(llvm::StringRef name) {
  for (const Target &target : knownTargets())
    if (target.name == name)
      return &target;
  return nullptr;
}

bool Target::hasFp8Recipe(llvm::StringRef recipe) const {
  for (::moe::caps::Fp8Recipe known : ::moe::caps::kFp8Recipes) {
    std::string_view name = ::moe::caps::fp8RecipeName(known);
    if (recipe == llvm::StringRef(name.data(), name.size()))
      return capabilities.hasRecipe(known);
  }
  return false;
}

std::string mlir::moe::knownTargetList() {
  std::string list;
  llvm::ArrayRef<Target> targets = knownTargets();
  for (auto [index, target] : llvm::enumerate(targets)) {
    if (index > 0)
      list += index + 1 == targets.size() ? " or " : ", ";
    list += target.name.str();
  }
  return list;
}
