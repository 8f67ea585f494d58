//===- PrecisionRecipe.h - the dtypes a training step is compiled in -*- C++ -*-===//
//
// Mixed precision is one decision the compiler makes and records
// (docs/precision.md): moe-mixed-precision resolves it from --precision,
// the `precision` of moe.transformer (which moe-expand-transformer records
// on the module) and the target, rewrites the step's dtypes, and records
// the result as the module attribute `moe.precision`. Every later reader
// (sharding and memory reports, the cost model, the planner, the artifact
// writer) takes the dtypes from the compiled program or from this record,
// never from assumed constants. The record is kPrecisionAttrName
// (MoENames.h); absent, the program is fp32.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_PRECISIONRECIPE_H
#define MOE_TRANSFORMS_PRECISIONRECIPE_H

#include "moe/Dialect/MoE/IR/MoENames.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace mlir::moe {

struct PrecisionRecipe {
  /// What activations, their gradients and the weights the forward and
  /// backward read are stored in.
  Precision compute = Precision::fp32;
  /// What weight gradients are reduced over ranks in (--grad-reduce-dtype);
  /// always fp32 when `compute` is.
  Precision gradReduce = Precision::fp32;

  bool isMixed() const { return compute == Precision::bf16; }
  /// Bytes of one element of an activation, an activation gradient or a
  /// message carrying either.
  unsigned activationBytes() const { return isMixed() ? 2 : 4; }
  /// Bytes per parameter: fp32 master, two fp32 moments, the BF16 working
  /// copy (none in fp32), the weight gradient.
  unsigned masterBytes() const { return 4; }
  unsigned momentBytes() const { return 8; }
  unsigned workingCopyBytes() const { return isMixed() ? 2 : 0; }
  unsigned gradientBytes() const {
    return gradReduce == Precision::bf16 ? 2 : 4;
  }
  unsigned bytesPerParameter() const {
    return masterBytes() + momentBytes() + workingCopyBytes() +
           gradientBytes();
  }
  /// The element type of activations (f32 or bf16).
  Type activationType(MLIRContext *context) const;
  /// "bf16" or "fp32, bf16 gradient reductions", for reports.
  std::string describe() const;

  bool operator==(const PrecisionRecipe &other) const {
    return compute == other.compute && gradReduce == other.gradReduce;
  }
};

/// "fp32" or "bf16"; none for anything else.
std::optional<Precision> parsePrecision(llvm::StringRef name);
/// "fp32" or "bf16".
llvm::StringRef precisionName(Precision precision);
/// "fp32, bf16", for errors listing what is known.
llvm::StringRef knownPrecisions();

/// The default of a target: fp32 for "cpu", bf16 for GPU targets.
Precision defaultPrecision(llvm::StringRef target);

/// The recipe a compile uses: `precisionFlag` (--precision; empty when not
/// given), else the request moe-expand-transformer recorded on `module`,
/// else `target`'s default; `gradReduceFlag` (--grad-reduce-dtype; empty:
/// the recorded request, else fp32). Fails with `error` ("--precision:
/// unknown precision 'fp16' (known: fp32, bf16)", "--grad-reduce-dtype=bf16
/// needs --precision=bf16") for a bad name or combination.
FailureOr<PrecisionRecipe> resolvePrecision(llvm::StringRef precisionFlag,
                                            llvm::StringRef gradReduceFlag,
                                            ModuleOp module,
                                            llvm::StringRef target,
                                            std::string &error);

/// The recipe recorded on `module`; fp32 when none is. A malformed record
/// fails with `error`.
FailureOr<PrecisionRecipe> readPrecision(ModuleOp module, std::string &error);
/// Records `recipe` on `module` (removes the record for plain fp32).
void recordPrecision(ModuleOp module, const PrecisionRecipe &recipe);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PRECISIONRECIPE_H
