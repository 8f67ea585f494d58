//===- PrecisionRecipe.cpp - the dtypes a training step is compiled in ----===//
#include "moe/Transforms/PrecisionRecipe.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mlir::moe;

Type PrecisionRecipe::activationType(MLIRContext *context) const {
  Builder builder(context);
  return isMixed() ? Type(builder.getBF16Type()) : Type(builder.getF32Type());
}

std::string PrecisionRecipe::describe() const {
  std::string text = precisionName(compute).str();
  if (isMixed())
    text += gradReduce == Precision::bf16 ? ", bf16 gradient reductions"
                                          : ", fp32 gradient reductions";
  return text;
}

std::optional<Precision> mlir::moe::parsePrecision(StringRef name) {
  if (name == "fp32")
    return Precision::fp32;
  if (name == "bf16")
    return Precision::bf16;
  return std::nullopt;
}

StringRef mlir::moe::precisionName(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

StringRef mlir::moe::knownPrecisions() { return "fp32, bf16"; }

Precision mlir::moe::defaultPrecision(StringRef target) {
  return target == "cpu" || target.empty() ? Precision::fp32 : Precision::bf16;
}

static FailureOr<Precision> parseNamed(StringRef what, StringRef name,
                                       std::string &error) {
  if (std::optional<Precision> precision = parsePrecision(name))
    return *precision;
  error = (what + ": unknown precision '" + name + "' (known: " +
           knownPrecisions() + ")")
              .str();
  return failure();
}

/// The request recorded on the module: its compute and grad_reduce names
/// (empty when absent).
static LogicalResult readRecord(ModuleOp module, StringRef &compute,
                                StringRef &gradReduce, std::string &error) {
  Attribute attr = module->getAttr(kPrecisionAttrName);
  if (!attr)
    return success();
  auto dict = dyn_cast<DictionaryAttr>(attr);
  if (!dict) {
    error = (Twine(kPrecisionAttrName) +
             " must be a dictionary {compute = \"bf16\", grad_reduce = "
             "\"fp32\"}")
                .str();
    return failure();
  }
  for (NamedAttribute entry : dict) {
    auto value = dyn_cast<StringAttr>(entry.getValue());
    StringRef key = entry.getName().strref();
    if ((key != "compute" && key != "grad_reduce") || !value) {
      error = (Twine(kPrecisionAttrName) + ": unknown entry '" + key +
               "' (known: compute, grad_reduce, both strings)")
                  .str();
      return failure();
    }
    (key == "compute" ? compute : gradReduce) = value.strref();
  }
  return success();
}

static FailureOr<PrecisionRecipe> combine(StringRef what, StringRef compute,
                                          StringRef gradReduce,
                                          std::string &error) {
  PrecisionRecipe recipe;
  FailureOr<Precision> computed = parseNamed(what, compute, error);
  if (failed(computed))
    return failure();
  recipe.compute = *computed;
  if (!gradReduce.empty()) {
    FailureOr<Precision> reduce =
        parseNamed("--grad-reduce-dtype", gradReduce, error);
    if (failed(reduce))
      return failure();
    recipe.gradReduce = *reduce;
  }
  if (recipe.gradReduce == Precision::bf16 && !recipe.isMixed()) {
    error = "--grad-reduce-dtype=bf16 needs --precision=bf16 (an fp32 step "
            "has no bf16 gradients to reduce)";
    return failure();
  }
  return recipe;
}

FailureOr<PrecisionRecipe>
mlir::moe::resolvePrecision(StringRef precisionFlag, StringRef gradReduceFlag,
                            ModuleOp module, StringRef target,
                            std::string &error) {
  StringRef recordedCompute, recordedReduce;
  if (module && failed(readRecord(module, recordedCompute, recordedReduce,
                                  error)))
    return failure();
  StringRef what = "--precision";
  StringRef compute = precisionFlag;
  if (compute.empty() && !recordedCompute.empty()) {
    compute = recordedCompute;
    what = "moe.transformer precision";
  }
  if (compute.empty())
    compute = precisionName(defaultPrecision(target));
  StringRef gradReduce =
      gradReduceFlag.empty() ? recordedReduce : gradReduceFlag;
  // A recorded bf16 reduction does not outlive an fp32 flag.
  if (gradReduceFlag.empty() && compute == "fp32")
    gradReduce = "";
  return combine(what, compute, gradReduce, error);
}

FailureOr<PrecisionRecipe> mlir::moe::readPrecision(ModuleOp module,
                                                    std::string &error) {
  StringRef compute, gradReduce;
  if (failed(readRecord(module, compute, gradReduce, error)))
    return failure();
  if (compute.empty())
    return PrecisionRecipe();
  return combine(kPrecisionAttrName, compute, gradReduce, error);
}

void mlir::moe::recordPrecision(ModuleOp module,
                                const PrecisionRecipe &recipe) {
  if (!recipe.isMixed()) {
    module->removeAttr(kPrecisionAttrName);
    return;
  }
  Builder builder(module.getContext());
  module->setAttr(
      kPrecisionAttrName,
      builder.getDictionaryAttr(
          {builder.getNamedAttr("compute", builder.getStringAttr("bf16")),
           builder.getNamedAttr(
               "grad_reduce",
               builder.getStringAttr(precisionName(recipe.gradReduce)))}));
}
