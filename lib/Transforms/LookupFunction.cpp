//===- LookupFunction.cpp - find the function a transformation works on ---===//
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
