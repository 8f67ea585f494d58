//===- ShapePattern.cpp - symbolic shape matching for the verifier --------===//
//
// See ShapePattern.h. Matching works on a copy of the bindings and commits
// only on success, so a failed match reports the expectation as it stood
// before the offending buffer was looked at.
//
//===----------------------------------------------------------------------===//

#include "ShapePattern.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moe::rt::verifier {

ShapePattern exactly(const std::vector<int64_t> &shape) {
  return ShapePattern(shape.begin(), shape.end());
}

bool ShapeMatcher::match(const std::vector<int64_t> &shape,
                         const ShapePattern &pattern, std::string &expected) {
  auto fail = [&] {
    expected = render(pattern);
    return false;
  };
  bool hasLeading = !pattern.empty() && pattern.front().isLeading();
  size_t trailing = hasLeading ? pattern.size() - 1 : pattern.size();
  // "..." stands for at least one dimension: the compiler's activations are
  // [B, S, X], and a bare [X] is a different (weight-like) thing.
  if (hasLeading ? shape.size() < trailing + 1 : shape.size() != trailing)
    return fail();

  std::map<std::string, int64_t> bound = symbols;
  std::optional<std::vector<int64_t>> lead = leading;
  size_t first = shape.size() - trailing;
  if (hasLeading) {
    std::vector<int64_t> dims(shape.begin(), shape.begin() + first);
    if (lead && *lead != dims)
      return fail();
    lead = std::move(dims);
  }
  for (size_t i = 0; i < trailing; ++i) {
    const DimPattern &dim = pattern[hasLeading ? i + 1 : i];
    int64_t actual = shape[first + i];
    if (dim.isFixed()) {
      if (actual != dim.value)
        return fail();
      continue;
    }
    auto [it, inserted] = bound.emplace(dim.symbol, actual);
    if (!inserted && it->second != actual)
      return fail();
  }
  symbols = std::move(bound);
  leading = std::move(lead);
  return true;
}

std::optional<int64_t> ShapeMatcher::lookup(const std::string &symbol) const {
  auto it = symbols.find(symbol);
  if (it == symbols.end())
    return std::nullopt;
  return it->second;
}

std::string ShapeMatcher::render(const ShapePattern &pattern) const {
  std::vector<std::string> parts;
  for (const DimPattern &dim : pattern) {
    if (dim.isFixed()) {
      parts.push_back(absl::StrCat(dim.value));
    } else if (dim.isLeading()) {
      if (leading)
        parts.push_back(absl::StrJoin(*leading, ", "));
      else
        parts.push_back("...");
    } else if (auto value = lookup(dim.symbol)) {
      parts.push_back(absl::StrCat(*value));
    } else {
      parts.push_back(dim.symbol);
    }
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

} // namespace moe::rt::verifier
