//===- ImportAttributes.h - the moe.transformer being built ----*- C++ -*-===//
//
// The attributes moe-import collects for one moe.transformer, each field
// reader adding what it mapped. Private to lib/Import.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_IMPORT_IMPORTATTRIBUTES_H
#define MOE_LIB_IMPORT_IMPORTATTRIBUTES_H

#include "mlir/IR/Builders.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace mlir::moe::import {

/// The attributes of the moe.transformer being built.
class Attributes {
public:
  explicit Attributes(Builder &b) : b(b) {}
  void integer(StringRef name, std::optional<int64_t> value) {
    if (value)
      list.emplace_back(b.getStringAttr(name), b.getI64IntegerAttr(*value));
  }
  void number(StringRef name, std::optional<double> value) {
    if (value)
      list.emplace_back(b.getStringAttr(name),
                        b.getF32FloatAttr(static_cast<float>(*value)));
  }
  void boolean(StringRef name, bool value) {
    list.emplace_back(b.getStringAttr(name), b.getBoolAttr(value));
  }
  void string(StringRef name, StringRef value) {
    list.emplace_back(b.getStringAttr(name), b.getStringAttr(value));
  }
  void attribute(StringRef name, Attribute value) {
    list.emplace_back(b.getStringAttr(name), value);
  }
  /// The value given to `name`, if any.
  Attribute lookup(StringRef name) const {
    for (const NamedAttribute &attr : list)
      if (attr.getName() == name)
        return attr.getValue();
    return {};
  }
  MLIRContext *context() const { return b.getContext(); }
  SmallVector<NamedAttribute> list;

private:
  Builder &b;
};

} // namespace mlir::moe::import

#endif // MOE_LIB_IMPORT_IMPORTATTRIBUTES_H
