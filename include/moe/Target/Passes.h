//===- Passes.h - moec's target passes --------------------------*- C++ -*-===//
#ifndef MOE_TARGET_PASSES_H
#define MOE_TARGET_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Target/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Target/Passes.h.inc"

} // namespace mlir::moe

#endif // MOE_TARGET_PASSES_H
