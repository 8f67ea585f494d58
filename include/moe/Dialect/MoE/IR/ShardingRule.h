//===- ShardingRule.h - einsum-like factor rules of the moe ops -*- C++ -*-===//
//
// Shardy's idea: every op states how the dimensions of its operands and
// results are made of "factors" (the indices of an einsum), and sharding
// propagation and partitioning work on factors only, whatever the op.
//
//   moe.linear  x[..., k] w[n, k] -> y[..., n]      is   "*k,nk->*n"
//
// A factor missing from a result is contracted away for that result: if it
// is split over mesh axes, the result holds partial values over those axes
// (a sum, for the ops whose result says so). A pinned factor must never be
// split (a softmax's class dimension, a sequence that positions depend on).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_DIALECT_MOE_IR_SHARDINGRULE_H
#define MOE_DIALECT_MOE_IR_SHARDINGRULE_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::moe {

class ShardingRule {
public:
  struct Factor {
    std::string name;
    int64_t size = 1;
    bool pinned = false;
  };
  /// The factors of one tensor dimension, outermost first.
  using DimFactors = llvm::SmallVector<unsigned, 2>;
  /// The dimensions of one operand or result.
  using TensorFactors = llvm::SmallVector<DimFactors>;

  /// Builds the rule of `op` from an einsum-like `spec`: comma-separated
  /// tensors (operands, `->`, results); a tensor is a string of dimensions,
  /// a dimension is one letter or a parenthesised group of letters
  /// (outermost first); `*` stands for all leading dimensions, shared by
  /// every tensor that has it. Letters of `pinned` must not be split.
  /// `sizes` gives factor sizes that the shapes alone do not determine
  /// (parts of grouped dimensions). Fails with a diagnostic on `op` when the
  /// spec does not match the op's shapes (a bug in the rule).
  static FailureOr<ShardingRule>
  fromSpec(Operation *op, llvm::StringRef spec, llvm::StringRef pinned = "",
           llvm::ArrayRef<std::pair<char, int64_t>> sizes = {},
           bool partialResultsAreSums = true);

  /// The rule of a reduction to scalars over whole tensors (norms, loss
  /// sums): every operand dimension is its own factor and the results are
  /// scalars whose partial values are not plain sums.
  static FailureOr<ShardingRule> fromTensorsWithOwnFactors(Operation *op);

  llvm::ArrayRef<Factor> getFactors() const { return factors; }
  llvm::ArrayRef<TensorFactors> getOperands() const { return operands; }
  llvm::ArrayRef<TensorFactors> getResults() const { return results; }
  /// Whether a result missing a split factor holds partial sums (linear
  /// algebra, gradient accumulation) rather than values that need an
  /// op-specific combination (means, norms).
  bool partialResultsAreSums() const { return sums; }

  /// For every factor, the factors it shares a tensor with (which may not
  /// be split over the same mesh axis).
  llvm::SmallVector<llvm::SmallSet<unsigned, 8>> coOccurringFactors() const;

  /// The rule as text, e.g. "(*0, *1, k), (n, k) -> (*0, *1, n)".
  std::string str() const;

private:
  llvm::SmallVector<Factor> factors;
  llvm::SmallVector<TensorFactors> operands, results;
  bool sums = true;
};

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_SHARDINGRULE_H
