//===- MoEDialect.cpp - the moe dialect -----------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/MoE/IR/MoEDialect.cpp.inc"
#include "moe/Dialect/MoE/IR/MoEEnums.cpp.inc"
#include "moe/Dialect/MoE/IR/MoEInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/MoE/IR/MoEAttrs.cpp.inc"

void MoEDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/Dialect/MoE/IR/MoEAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "moe/Dialect/MoE/IR/MoEOps.cpp.inc"
      >();
}
