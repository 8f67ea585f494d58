//===- ShapePattern.h - symbolic shape matching for the verifier -*- C++
//-*-===//
//
// The per-opcode shape rules are written as patterns such as {"...", "K"} for
// x, {"N", "K"} for w and {"...", "N"} for y. A symbol binds to the first
// dimension it meets and must agree everywhere after; "..." binds to the
// leading dimensions of an activation (at least one), so the input and
// output of an op must have the same leading dims. On a mismatch the pattern
// is rendered with what was known before, e.g. "[N, 64]".
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ARTIFACT_SHAPEPATTERN_H
#define MOE_LIB_RUNTIME_ARTIFACT_SHAPEPATTERN_H

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe::rt::verifier {

/// One element of a shape pattern: a fixed size, a symbol, or "...".
class DimPattern {
public:
  DimPattern(int64_t value) : value(value) {}
  DimPattern(int value) : value(value) {}
  DimPattern(const char *symbol) : symbol(symbol) {}

  bool isFixed() const { return symbol.empty(); }
  bool isLeading() const { return symbol == "..."; }

  int64_t value = 0;
  std::string symbol;
};

using ShapePattern = std::vector<DimPattern>;

/// A fixed pattern equal to `shape`.
ShapePattern exactly(const std::vector<int64_t> &shape);

class ShapeMatcher {
public:
  /// Matches `shape` against `pattern`, binding its symbols when it does. On
  /// a mismatch nothing is bound and `expected` receives the pattern
  /// rendered with the bindings made by earlier matches.
  bool match(const std::vector<int64_t> &shape, const ShapePattern &pattern,
             std::string &expected);

  /// The value bound to `symbol`, if any.
  std::optional<int64_t> lookup(const std::string &symbol) const;

private:
  std::string render(const ShapePattern &pattern) const;

  std::map<std::string, int64_t> symbols;
  std::optional<std::vector<int64_t>> leading;
};

} // namespace moe::rt::verifier

#endif // MOE_LIB_RUNTIME_ARTIFACT_SHAPEPATTERN_H
