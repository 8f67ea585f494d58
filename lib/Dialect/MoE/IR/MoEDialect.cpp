//===- MoEDialect.cpp - the moe dialect -----------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Runtime/Capabilities.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
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

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

namespace {
/// A discardable attribute moec's passes write, and the kind of value they
/// write (what a hand-edited one must hold too).
struct DiscardableAttribute {
  StringLiteral name;
  StringLiteral expected;
  bool (*matches)(Attribute);
};
} // namespace

template <typename T>
static bool is(Attribute value) {
  return isa<T>(value);
}

/// An array whose every element is a T.
template <typename T>
static bool isArrayOf(Attribute value) {
  auto array = dyn_cast<ArrayAttr>(value);
  return array && llvm::all_of(array, [](Attribute element) {
           return isa<T>(element);
         });
}

/// An integer attribute in [lo, hi].
static bool isIntegerIn(Attribute value, int64_t lo, int64_t hi) {
  auto integer = dyn_cast<IntegerAttr>(value);
  return integer && integer.getValue().getSignificantBits() <= 64 &&
         integer.getInt() >= lo && integer.getInt() <= hi;
}

/// A count of ranks or microbatches: in [1, kMaxMeshRanks], so that what
/// is allocated per rank stays small.
static bool isCount(Attribute value) {
  return isIntegerIn(value, 1, kMaxMeshRanks);
}

/// A pipeline stage, or -1 for an op every stage runs.
static bool isStage(Attribute value) {
  return isIntegerIn(value, -1, kMaxMeshRanks - 1);
}

/// Per pipeline rank, the microbatches it holds at once: counts as above.
static bool isSlotCounts(Attribute value) {
  auto counts = dyn_cast<DenseI64ArrayAttr>(value);
  return counts && llvm::all_of(counts.asArrayRef(), [](int64_t count) {
           return count >= 1 && count <= kMaxMeshRanks;
         });
}

static constexpr StringLiteral kInteger = "an integer";
static constexpr StringLiteral kCount = "an integer in [1, 1048576]";
static constexpr StringLiteral kUnit = "a unit attribute";
static constexpr StringLiteral kI64Array = "an array<i64: ...>";

/// `{compute = "fp32"|"bf16", grad_reduce = "fp32"|"bf16"}`.
static bool isPrecisionRecord(Attribute attr) {
  auto dict = dyn_cast<DictionaryAttr>(attr);
  if (!dict)
    return false;
  return llvm::all_of(dict, [](NamedAttribute entry) {
    auto value = dyn_cast<StringAttr>(entry.getValue());
    StringRef key = entry.getName().strref();
    return (key == "compute" || key == "grad_reduce") && value &&
           (value.strref() == "fp32" || value.strref() == "bf16");
  });
}

static bool isTargetName(Attribute attr) {
  auto name = dyn_cast<StringAttr>(attr);
  return name && ::moe::caps::targetCapabilities(name.strref()) != nullptr;
}

static const DiscardableAttribute kOperationAttributes[] = {
    {kArenaBytesAttrName, kInteger, is<IntegerAttr>},
    {kFullRecomputeFlopsAttrName, "a float", is<FloatAttr>},
    {kMemoryBudgetAttrName, kInteger, is<IntegerAttr>},
    {kMicrobatchesAttrName, kCount, isCount},
    {kModelAttrName, "a dictionary", is<DictionaryAttr>},
    {kOffsetsAttrName, kI64Array, is<DenseI64ArrayAttr>},
    {kPartitionedAttrName, kUnit, is<UnitAttr>},
    {kPeakLiveBytesAttrName, kInteger, is<IntegerAttr>},
    {kPipelinePhaseAttrName, "a string", is<StringAttr>},
    {kPipelineRanksAttrName, kCount, isCount},
    {kPipelineScheduleAttrName, "a dictionary", is<DictionaryAttr>},
    {kPipelineSlotsAttrName, "an array<i64: ...> of counts in [1, 1048576]",
     isSlotCounts},
    {kPipelineStageAttrName, "an integer in [-1, 1048576)", isStage},
    {kPrecisionAttrName,
     "a dictionary {compute = \"fp32\"|\"bf16\", grad_reduce = "
     "\"fp32\"|\"bf16\"}",
     isPrecisionRecord},
    {kRecomputeFlopsAttrName, "a float", is<FloatAttr>},
    {kRecomputedAttrName, kUnit, is<UnitAttr>},
    {kShardingAttrName, "an array of #moe.sharding, one per result",
     isArrayOf<ShardingAttr>},
    {kShardingOriginAttrName, "an array of strings, one per result",
     isArrayOf<StringAttr>},
    {kShardingSeedAttrName, "a #moe.sharding", is<ShardingAttr>},
    {kShardingSeedOriginAttrName, "an array of strings, one per dimension",
     isArrayOf<StringAttr>},
    {kTargetAttrName, "a target name (cpu, a100, h100, h200)", isTargetName},
};

static const DiscardableAttribute kArgumentAttributes[] = {
    {kShardingAttrName, "a #moe.sharding", is<ShardingAttr>},
    {kShardingOriginAttrName, "a string", is<StringAttr>},
};

static const DiscardableAttribute kResultAttributes[] = {
    {kGradOfAttrName, "a symbol reference to a moe.param",
     is<FlatSymbolRefAttr>},
};

/// Checks `attr` against `known`; `where` prefixes the messages ("argument
/// 0 " for a function argument).
static LogicalResult verifyDiscardable(Operation *op, NamedAttribute attr,
                                       ArrayRef<DiscardableAttribute> known,
                                       StringRef knownWhat,
                                       const Twine &where) {
  StringRef name = attr.getName().strref();
  const DiscardableAttribute *entry =
      llvm::find_if(known, [&](const DiscardableAttribute &candidate) {
        return candidate.name == name;
      });
  if (entry == known.end()) {
    SmallVector<StringRef> names;
    for (const DiscardableAttribute &candidate : known)
      names.push_back(candidate.name);
    return op->emitOpError()
           << where << "has unknown attribute '" << name << "'; known "
           << knownWhat << ": " << llvm::join(names, ", ");
  }
  if (!entry->matches(attr.getValue()))
    return op->emitOpError() << where << "expected attribute '" << name
                             << "' to be " << entry->expected << ", got "
                             << attr.getValue();
  return success();
}

LogicalResult MoEDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  return verifyDiscardable(op, attr, kOperationAttributes, "moe attributes",
                           "");
}

LogicalResult MoEDialect::verifyRegionArgAttribute(Operation *op,
                                                   unsigned region,
                                                   unsigned argument,
                                                   NamedAttribute attr) {
  return verifyDiscardable(op, attr, kArgumentAttributes,
                           "moe argument attributes",
                           "argument " + Twine(argument) + " ");
}

LogicalResult MoEDialect::verifyRegionResultAttribute(Operation *op,
                                                      unsigned region,
                                                      unsigned result,
                                                      NamedAttribute attr) {
  return verifyDiscardable(op, attr, kResultAttributes,
                           "moe result attributes",
                           "result " + Twine(result) + " ");
}
