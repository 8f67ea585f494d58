//===- LookupFunction.cpp - find the function a transformation works on ---===//
#include "moe/Transforms/Target.h"
#include "moe/Transforms/Transforms.h"

using namespace mlir;

FailureOr<func::FuncOp> mlir::moe::lookupFunction(ModuleOp module,
                                                  StringRef name,
                                                  StringRef purpose) {
  if (auto function = module.lookupSymbol<func::FuncOp>(name))
    return function;
  return module.emitError() << "no function named '" << name << "' "
                            << purpose;
}

FailureOr<func::FuncOp> mlir::moe::lookupFusionFunction(
    ModuleOp module, StringRef name, StringRef target,
    llvm::function_ref<bool(const Target &)> runsFused, StringRef purpose) {
  const Target *record = lookupTarget(target);
  if (!record)
    return module.emitError() << "unknown target '" << target << "': expected "
                              << knownTargetList();
  if (!runsFused(*record))
    return func::FuncOp();
  return lookupFunction(module, name, purpose);
}
