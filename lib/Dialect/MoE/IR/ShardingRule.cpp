//===- ShardingRule.cpp - einsum-like factor rules ------------------------===//
#include "moe/Dialect/MoE/IR/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// One dimension of a tensor spec: factor names, or the leading-dims marker.
struct SpecDim {
  llvm::SmallVector<std::string, 2> names;
  bool leading = false;
};

/// Parses "*k", "nk", "b(gd)s" into dimensions; nullopt when malformed.
std::optional<llvm::SmallVector<SpecDim>> parseTensorSpec(StringRef text) {
  llvm::SmallVector<SpecDim> dims;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ')
      continue;
    SpecDim dim;
    if (c == '*') {
      if (!dims.empty())
        return std::nullopt;
      dim.leading = true;
    } else if (c == '(') {
      size_t close = text.find(')', i);
      if (close == StringRef::npos || close == i + 1)
        return std::nullopt;
      for (char letter : text.slice(i + 1, close))
        dim.names.push_back(std::string(1, letter));
      i = close;
    } else if (llvm::isAlpha(c)) {
      dim.names.push_back(std::string(1, c));
    } else {
      return std::nullopt;
    }
    dims.push_back(dim);
  }
  return dims;
}
} // namespace

FailureOr<ShardingRule>
ShardingRule::fromSpec(Operation *op, StringRef spec, StringRef pinned,
                       ArrayRef<std::pair<char, int64_t>> sizes,
                       bool partialResultsAreSums) {
  auto fail = [&](const Twine &why) -> FailureOr<ShardingRule> {
    return op->emitOpError() << "has a sharding rule '" << spec
                             << "' that does not fit it: " << why;
  };
  auto [lhs, rhs] = spec.split("->");
  // An empty tensor spec is a scalar; an empty side has no tensors only
  // when the op has none there.
  SmallVector<StringRef> lhsSpecs, rhsSpecs;
  if (!(lhs.trim().empty() && op->getNumOperands() == 0))
    lhs.split(lhsSpecs, ',', -1, /*KeepEmpty=*/true);
  if (!(rhs.trim().empty() && op->getNumResults() == 0))
    rhs.split(rhsSpecs, ',', -1, /*KeepEmpty=*/true);
  if (lhsSpecs.size() != op->getNumOperands() ||
      rhsSpecs.size() != op->getNumResults())
    return fail("wrong number of tensors");

  ShardingRule rule;
  rule.sums = partialResultsAreSums;
  llvm::StringMap<unsigned> index;
  auto factorOf = [&](const std::string &name) {
    auto [it, inserted] = index.try_emplace(name, rule.factors.size());
    if (inserted)
      rule.factors.push_back({name, 0, pinned.contains(name)});
    return it->second;
  };
  // The dimension sizes of every factor group, for size inference below.
  SmallVector<std::pair<DimFactors, int64_t>> groups;
  std::optional<int64_t> leadingCount;

  auto addTensor = [&](StringRef text, Type type,
                       TensorFactors &out) -> LogicalResult {
    auto shaped = dyn_cast<ShapedType>(type);
    std::optional<SmallVector<SpecDim>> dims = parseTensorSpec(text.trim());
    if (!shaped || !dims)
      return failure();
    int64_t explicitDims = 0;
    for (const SpecDim &dim : *dims)
      explicitDims += dim.leading ? 0 : 1;
    for (const SpecDim &dim : *dims) {
      if (dim.leading) {
        int64_t count = shaped.getRank() - explicitDims;
        if (count < 0 || (leadingCount && *leadingCount != count))
          return failure();
        leadingCount = count;
        for (int64_t i = 0; i < count; ++i)
          out.push_back(DimFactors{factorOf("*" + std::to_string(i))});
        continue;
      }
      DimFactors factors;
      for (const std::string &name : dim.names)
        factors.push_back(factorOf(name));
      out.push_back(factors);
    }
    if (static_cast<int64_t>(out.size()) != shaped.getRank())
      return failure();
    for (auto [factors, size] : llvm::zip(out, shaped.getShape()))
      groups.emplace_back(factors, size);
    return success();
  };
  for (auto [text, value] : llvm::zip(lhsSpecs, op->getOperands())) {
    rule.operands.emplace_back();
    if (failed(addTensor(text, value.getType(), rule.operands.back())))
      return fail("operand spec '" + text.trim() + "' does not match its shape");
  }
  for (auto [text, value] : llvm::zip(rhsSpecs, op->getResults())) {
    rule.results.emplace_back();
    if (failed(addTensor(text, value.getType(), rule.results.back())))
      return fail("result spec '" + text.trim() + "' does not match its shape");
  }

  // Sizes: given ones, then single-factor dimensions, then what grouped
  // dimensions leave over, until nothing changes.
  for (auto [letter, size] : sizes)
    rule.factors[factorOf(std::string(1, letter))].size = size;
  for (bool changed = true; changed;) {
    changed = false;
    for (auto &[factors, size] : groups) {
      int64_t known = 1;
      SmallVector<unsigned> unknown;
      for (unsigned f : factors) {
        if (rule.factors[f].size > 0)
          known *= rule.factors[f].size;
        else
          unknown.push_back(f);
      }
      if (unknown.size() == 1 && known > 0 && size % known == 0) {
        rule.factors[unknown[0]].size = size / known;
        changed = true;
      }
    }
  }
  for (auto &[factors, size] : groups) {
    int64_t product = 1;
    for (unsigned f : factors) {
      if (rule.factors[f].size <= 0)
        return fail("the size of factor '" + rule.factors[f].name +
                    "' is not determined");
      product *= rule.factors[f].size;
    }
    if (product != size)
      return fail("a dimension of size " + Twine(size) +
                  " is not the product of its factors");
  }
  return rule;
}

FailureOr<ShardingRule> ShardingRule::fromTensorsWithOwnFactors(Operation *op) {
  ShardingRule rule;
  rule.sums = false;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    auto shaped = cast<ShapedType>(operand.getType());
    TensorFactors dims;
    for (int64_t d = 0; d < shaped.getRank(); ++d) {
      dims.push_back(DimFactors{static_cast<unsigned>(rule.factors.size())});
      rule.factors.push_back({std::to_string(i) + "." + std::to_string(d),
                              shaped.getDimSize(d), false});
    }
    rule.operands.push_back(dims);
  }
  for (Value result : op->getResults()) {
    if (cast<ShapedType>(result.getType()).getRank() != 0)
      return op->emitOpError()
             << "has a sharding rule for scalar results only";
    rule.results.emplace_back();
  }
  return rule;
}

SmallVector<llvm::SmallSet<unsigned, 8>>
ShardingRule::coOccurringFactors() const {
  SmallVector<llvm::SmallSet<unsigned, 8>> together(factors.size());
  auto tensors = llvm::concat<const TensorFactors>(operands, results);
  for (const TensorFactors &dims : tensors)
    for (const DimFactors &dim : dims)
      for (unsigned f : dim)
        for (const DimFactors &other : dims)
          for (unsigned g : other)
            if (f != g)
              together[f].insert(g);
  return together;
}

std::string ShardingRule::str() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto printTensors = [&](ArrayRef<TensorFactors> tensors) {
    llvm::interleaveComma(tensors, os, [&](const TensorFactors &dims) {
      os << "(";
      llvm::interleaveComma(dims, os, [&](const DimFactors &dim) {
        if (dim.size() == 1) {
          os << factors[dim[0]].name;
          return;
        }
        os << "[";
        llvm::interleave(
            dim, os, [&](unsigned f) { os << factors[f].name; }, " ");
        os << "]";
      });
      os << ")";
    });
  };
  printTensors(operands);
  os << " -> ";
  printTensors(results);
  return text;
}
