//===- FormatNumber.h - numbers as diagnostics show them --------*- C++ -*-===//
//
// One spelling of a real number for every message of the dialect and the
// importer: `0.001` and `1e+06`, not `1.000000e-03`.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_DIALECT_MOE_IR_FORMATNUMBER_H
#define MOE_DIALECT_MOE_IR_FORMATNUMBER_H

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::moe {

/// `value` as printf's %g writes it.
inline std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", value);
  return text;
}

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_FORMATNUMBER_H
