//===- MoEOps.cpp - verifiers of the moe ops ------------------------------===//
//
// Every invariant stated in an op's "Constraints:" list is checked here, and
// each message has an expected-error case in test/Dialect/MoE/invalid.mlir.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/IR/FormatNumber.h"
#include "moe/Dialect/MoE/IR/TransformerLimits.h"
#include "GroupSize.h"

#include "mlir/IR/BuiltinOps.h"
#include "moe/Runtime/HeadParts.h"
#include "moe/Runtime/Program.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

/// A shape as `[8, 64, 64]` for diagnostics.
static std::string fmt(ArrayRef<int64_t> shape) {
  std::string out = "[";
  llvm::raw_string_ostream os(out);
  llvm::interleave(shape, os, ", ");
  return out + "]";
}

/// A float as `0.001` (not `1.000000e-03`) for diagnostics.
static std::string fmt(double value) { return formatNumber(value); }

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<ShapedType>(v.getType()).getShape();
}

/// Checks that `value` has exactly the shape `expected`.
static LogicalResult expectShape(Operation *op, StringRef what, Value value,
                                 ArrayRef<int64_t> expected) {
  if (shapeOf(value) == expected)
    return success();
  return op->emitOpError() << "expected " << what << " of shape "
                           << fmt(expected) << ", got "
                           << fmt(shapeOf(value));
}

/// Checks that `value` has rank at least `rank`.
static LogicalResult expectMinRank(Operation *op, StringRef what, Value value,
                                   int64_t rank) {
  if (static_cast<int64_t>(shapeOf(value).size()) >= rank)
    return success();
  return op->emitOpError() << "expected " << what << " of rank >= " << rank
                           << ", got " << fmt(shapeOf(value));
}

static LogicalResult expectRank(Operation *op, StringRef what, Value value,
                                int64_t rank) {
  if (static_cast<int64_t>(shapeOf(value).size()) == rank)
    return success();
  return op->emitOpError() << "expected " << what << " of rank " << rank
                           << ", got " << fmt(shapeOf(value));
}

static SmallVector<int64_t> concat(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  SmallVector<int64_t> out(a);
  out.append(b.begin(), b.end());
  return out;
}

static LogicalResult expectTopK(Operation *op, int64_t topK, int64_t experts) {
  if (topK >= 1 && topK <= experts)
    return success();
  return op->emitOpError() << "expected 1 <= top_k <= " << experts
                           << " (experts), got " << topK;
}

/// Checks that `axes` (the attribute `attrName`; absent is fine) names
/// mesh axes moec implements, each at most once.
static LogicalResult verifyAxisNames(Operation *op, StringRef attrName,
                                     std::optional<ArrayAttr> axes) {
  if (!axes)
    return success();
  llvm::SmallSet<StringRef, 4> seen;
  for (StringRef axis : axes->getAsValueRange<StringAttr>()) {
    if (!isKnownMeshAxis(axis))
      return op->emitOpError() << attrName << ": "
                               << unknownMeshAxisMessage(axis);
    if (!seen.insert(axis).second)
      return op->emitOpError() << attrName << ": axis '" << axis
                               << "' is listed twice";
  }
  return success();
}

std::optional<int64_t> mlir::moe::boundedNumElements(ShapedType type) {
  int64_t elements = 1;
  for (int64_t size : type.getShape())
    if (size < 0 || llvm::MulOverflow(elements, size, elements) ||
        elements > kMaxTensorElements)
      return std::nullopt;
  return elements;
}

/// Calls `check` on every attribute of `op`, inherent and discardable,
/// until it fails. (Operation::getAttrs would build a dictionary of them
/// for every op verified, after every pass.)
static LogicalResult
checkEachAttribute(Operation *op,
                   function_ref<LogicalResult(StringRef, Attribute)> check) {
  for (StringAttr name : op->getName().getAttributeNames())
    if (std::optional<Attribute> value = op->getInherentAttr(name))
      if (*value && failed(check(name.getValue(), *value)))
        return failure();
  for (NamedAttribute attr : op->getDiscardableAttrs())
    if (failed(check(attr.getName().getValue(), attr.getValue())))
      return failure();
  return success();
}

LogicalResult mlir::moe::verifyBoundedTensors(Operation *op) {
  auto check = [&](Type type, const Twine &where) -> LogicalResult {
    auto shaped = dyn_cast<ShapedType>(type);
    if (!shaped || !shaped.hasStaticShape() || boundedNumElements(shaped))
      return success();
    return op->emitOpError()
           << "expected at most " << kMaxTensorElements
           << " elements (2^48) per tensor, got " << type << " (" << where
           << ")";
  };
  for (auto [i, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(check(type, "operand " + Twine(i))))
      return failure();
  for (auto [i, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(check(type, "result " + Twine(i))))
      return failure();
  auto checkTypeAttr = [&](StringRef name, Attribute value) {
    auto type = dyn_cast<TypeAttr>(value);
    return type ? check(type.getValue(), "attribute '" + name + "'")
                : success();
  };
  return checkEachAttribute(op, checkTypeAttr);
}

/// A normal initialisation's standard deviation is in (0, kMaxInitStd]:
/// weights of std > 1 make activations grow by the width at every layer.
/// The runtime's artifact verifier applies the same bound to every buffer.
static LogicalResult verifyInitStd(Operation *op, float std) {
  if (std > 0 && std <= ::moe::rt::kMaxInitStd)
    return success();
  return op->emitOpError() << "expected 0 < init_std <= "
                           << fmt(::moe::rt::kMaxInitStd) << ", got "
                           << fmt(std);
}

/// From experts / top_k on, an expert's capacity holds every token, so a
/// larger factor drops nothing more; beyond `experts` it would only inflate
/// the capacity count past the number of routed tokens.
static LogicalResult verifyCapacityFactor(Operation *op, float factor,
                                          int64_t experts) {
  if (factor >= 0 && factor <= static_cast<float>(experts))
    return success();
  return op->emitOpError() << "expected 0 <= capacity_factor <= " << experts
                           << " (experts), got " << fmt(factor);
}

/// The router's selection rule (see moe.router): `groups` divides the
/// experts, with two or more per group when there are several (a group
/// scores its two best), and the `top_groups` best groups hold at least
/// `top_k` experts; the routing weights' scale is positive. `names` are the
/// attributes' names in the op (the router's or the transformer's HF ones).
struct RoutingAttrNames {
  StringRef scale, groups, topGroups;
};
static LogicalResult verifyRoutingRule(Operation *op, int64_t experts,
                                       int64_t topK, float scale,
                                       int64_t groups, int64_t topGroups,
                                       const RoutingAttrNames &names) {
  if (!(scale > 0.0f))
    return op->emitOpError()
           << "expected " << names.scale << " > 0, got " << fmt(scale);
  if (groups < 1 || groups > experts || experts % groups != 0)
    return op->emitOpError() << "expected " << names.groups << " to divide the "
                             << experts << " experts, got " << groups;
  if (groups > 1 && experts / groups < 2)
    return op->emitOpError()
           << "expected at least 2 experts per group (a group scores its two "
              "best), got "
           << experts << " experts in " << groups << " groups";
  if (topGroups < 1 || topGroups > groups)
    return op->emitOpError()
           << "expected 1 <= " << names.topGroups << " <= " << groups << " ("
           << names.groups << "), got " << topGroups;
  if (topGroups * (experts / groups) < topK)
    return op->emitOpError()
           << "expected the " << topGroups << " selected groups of "
           << experts / groups << " experts to hold top_k = " << topK
           << " experts";
  return success();
}

LogicalResult mlir::moe::verifyFiniteFloatAttributes(Operation *op) {
  auto check = [&](StringRef name, Attribute value) -> LogicalResult {
    if (auto f = dyn_cast<FloatAttr>(value)) {
      if (!f.getValue().isFinite())
        return op->emitOpError() << "expected attribute '" << name
                                 << "' to be finite, got "
                                 << fmt(f.getValueAsDouble());
    } else if (auto array = dyn_cast<DenseF32ArrayAttr>(value)) {
      for (auto [i, element] : llvm::enumerate(array.asArrayRef()))
        if (!std::isfinite(element))
          return op->emitOpError()
                 << "expected attribute '" << name << "' to be finite, got "
                 << fmt(element) << " at index " << i;
    }
    return success();
  };
  return checkEachAttribute(op, check);
}

LogicalResult mlir::moe::verifyKnownAttributes(Operation *op) {
  ArrayRef<StringAttr> inherent = op->getName().getAttributeNames();
  for (NamedAttribute attr : op->getDiscardableAttrs()) {
    // `moe.*` names are the dialect's to check (verifyOperationAttribute).
    if (attr.getName().strref().starts_with("moe.") ||
        llvm::is_contained(inherent, attr.getName()))
      continue;
    SmallVector<StringRef> known;
    for (StringAttr name : inherent)
      known.push_back(name.getValue());
    llvm::sort(known);
    return op->emitOpError()
           << "has unknown attribute '" << attr.getName().strref()
           << "'; known attributes: "
           << (known.empty() ? std::string("none") : llvm::join(known, ", "));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// TransformerOp
//===----------------------------------------------------------------------===//

// The largest model moe.transformer accepts: moe/Dialect/MoE/IR/
// TransformerLimits.h.

// The sizes are within their maxima, so no product overflows: at most 2^62.
int64_t mlir::moe::transformerParameters(TransformerOp op) {
  int64_t hidden = op.getHidden(), heads = op.getHeads();
  int64_t kv = op.getKvHeads() * (hidden / heads);
  int64_t experts = op.getExperts(), ffn = op.getFfn();
  int64_t denseFfn = op.getDenseFfn().value_or(ffn);
  int64_t dense = op.getDenseLayers().size();
  int64_t moe = static_cast<int64_t>(op.getLayers()) - dense;
  int64_t attention = 2 * hidden * hidden + 2 * kv * hidden + 2 * hidden;
  int64_t params = 2 * static_cast<int64_t>(op.getVocab()) * hidden + hidden;
  params += static_cast<int64_t>(op.getLayers()) * attention;
  params += dense * 3 * denseFfn * hidden;
  params += moe * (experts * hidden + 3 * experts * ffn * hidden);
  return params;
}

/// Multi-head latent attention's sizes: all of kv_lora_rank,
/// qk_rope_head_dim, qk_nope_head_dim and v_head_dim (and optionally
/// q_lora_rank) or none; the RoPE part even; no grouped-query heads, no
/// head_dim and no QK-norm beside them.
static LogicalResult verifyLatentAttention(TransformerOp op) {
  std::pair<StringRef, std::optional<uint64_t>> sizes[] = {
      {"kv_lora_rank", op.getKvLoraRank()},
      {"qk_rope_head_dim", op.getQkRopeHeadDim()},
      {"qk_nope_head_dim", op.getQkNopeHeadDim()},
      {"v_head_dim", op.getVHeadDim()},
      {"q_lora_rank", op.getQLoraRank()}};
  bool latent = op.getKvLoraRank().has_value();
  for (auto [name, value] : sizes) {
    if (!value) {
      if (latent && name != "q_lora_rank")
        return op.emitOpError()
               << "expected " << name
               << " with kv_lora_rank (multi-head latent attention)";
      continue;
    }
    if (!latent)
      return op.emitOpError() << "expected kv_lora_rank with " << name
                              << " (multi-head latent attention)";
    auto size = static_cast<int64_t>(*value);
    if (size <= 0 || size > kMaxHidden)
      return op.emitOpError() << "expected 0 < " << name << " <= " << kMaxHidden
                              << ", got " << size;
  }
  if (!latent) {
    if (op.getRopeInterleave())
      return op.emitOpError() << "expected rope_interleave only with "
                                 "multi-head latent attention (kv_lora_rank)";
    return success();
  }
  if (*op.getQkRopeHeadDim() % 2 != 0)
    return op.emitOpError()
           << "expected an even qk_rope_head_dim for rope, got "
           << *op.getQkRopeHeadDim();
  int64_t heads = op.getHeads();
  int64_t widest = static_cast<int64_t>(std::max(
      *op.getQkRopeHeadDim() + *op.getQkNopeHeadDim(), *op.getVHeadDim()));
  if (widest > kMaxHidden / heads)
    return op.emitOpError() << "expected heads * head widths <= " << kMaxHidden
                            << ", got " << heads << " * " << widest;
  if (op.getKvHeads() != op.getHeads())
    return op.emitOpError()
           << "expected kv_heads = heads (" << heads
           << ") with multi-head latent attention, got " << op.getKvHeads();
  if (op.getHeadDim())
    return op.emitOpError()
           << "expected no head_dim with multi-head latent attention (its "
              "widths are qk_nope_head_dim, qk_rope_head_dim, v_head_dim)";
  if (op.getQkNorm())
    return op.emitOpError()
           << "expected qk_norm = false with multi-head latent attention";
  return success();
}

LogicalResult TransformerOp::verify() {
  std::tuple<StringRef, int64_t, int64_t> sizes[] = {
      {"vocab", getVocab(), kMaxVocab},
      {"hidden", getHidden(), kMaxHidden},
      {"layers", getLayers(), kMaxLayers},
      {"heads", getHeads(), kMaxHidden},
      {"kv_heads", getKvHeads(), kMaxHidden},
      {"experts", getExperts(), kMaxExperts},
      {"ffn", getFfn(), kMaxFfn},
      {"seq", getSeq(), kMaxSeq},
      {"batch", getBatch(), kMaxBatch}};
  for (auto [name, value, max] : sizes) {
    if (value <= 0)
      return emitOpError() << "expected " << name << " > 0, got " << value;
    if (value > max)
      return emitOpError() << "expected " << name << " <= " << max
                           << ", got " << value;
  }
  if (getDenseFfn()) {
    int64_t denseFfn = static_cast<int64_t>(*getDenseFfn());
    if (denseFfn <= 0)
      return emitOpError() << "expected dense_ffn > 0, got " << denseFfn;
    if (denseFfn > kMaxFfn)
      return emitOpError() << "expected dense_ffn <= " << kMaxFfn << ", got "
                           << denseFfn;
  }
  int64_t shared = static_cast<int64_t>(getSharedExperts());
  if (shared < 0)
    return emitOpError() << "expected shared_experts >= 0, got " << shared;
  if (shared > kMaxFfn / static_cast<int64_t>(getFfn()))
    return emitOpError() << "expected shared_experts * ffn <= " << kMaxFfn
                         << ", got " << shared << " * " << getFfn();
  if (failed(verifyLatentAttention(*this)))
    return failure();
  int64_t headDim;
  if (getKvLoraRank()) {
    // MLA's heads have their own widths (checked above).
    headDim = static_cast<int64_t>(*getQkRopeHeadDim());
  } else if (std::optional<uint64_t> given = getHeadDim()) {
    headDim = static_cast<int64_t>(*given);
    if (headDim <= 0)
      return emitOpError() << "expected head_dim > 0, got " << headDim;
    if (headDim > kMaxHidden / static_cast<int64_t>(getHeads()))
      return emitOpError() << "expected heads * head_dim <= " << kMaxHidden
                           << ", got " << getHeads() << " * " << headDim;
  } else {
    if (getHidden() % getHeads() != 0)
      return emitOpError() << "expected hidden (" << getHidden()
                           << ") to be divisible by heads (" << getHeads()
                           << ")";
    headDim = getHidden() / getHeads();
  }
  if (getHeads() % getKvHeads() != 0)
    return emitOpError() << "expected heads (" << getHeads()
                         << ") to be divisible by kv_heads (" << getKvHeads()
                         << ")";
  if (headDim % 2 != 0)
    return emitOpError() << "expected an even head dimension for rope, got "
                         << headDim;
  if (failed(expectTopK(*this, getTopK(), getExperts())))
    return failure();
  int64_t tokens = static_cast<int64_t>(getBatch()) * getSeq();
  if (tokens > kMaxTokens)
    return emitOpError() << "expected batch * seq <= " << kMaxTokens
                         << " tokens per step, got " << tokens;
  if (tokens * static_cast<int64_t>(getTopK()) > kMaxAssignments)
    return emitOpError() << "expected batch * seq * top_k <= "
                         << kMaxAssignments
                         << " routed tokens per step, got "
                         << tokens * static_cast<int64_t>(getTopK());
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t layer : getDenseLayers()) {
    if (layer < 0 || layer >= static_cast<int64_t>(getLayers()))
      return emitOpError() << "dense layer " << layer << " is outside [0, "
                           << getLayers() << ")";
    if (!seen.insert(layer).second)
      return emitOpError() << "dense layer " << layer << " is listed twice";
  }
  if (int64_t params = transformerParameters(*this); params > kMaxParameters)
    return emitOpError() << "expected at most " << kMaxParameters
                         << " parameters (2^48), got " << params;
  std::pair<StringRef, float> positives[] = {
      {"rms_eps", getRmsEps().convertToFloat()},
      {"rope_theta", getRopeTheta().convertToFloat()},
      {"softmax_scale_factor", getSoftmaxScaleFactor().convertToFloat()}};
  for (auto [name, value] : positives)
    if (!(value > 0))
      return emitOpError() << "expected " << name << " > 0, got " << fmt(value);
  if (failed(verifyInitStd(*this, getInitStd().convertToFloat())))
    return failure();
  if (!(getAuxCoef().convertToFloat() >= 0))
    return emitOpError() << "expected aux_coef >= 0, got "
                         << fmt(getAuxCoef().convertToFloat());
  if (std::optional<uint64_t> eos = getEosTokenId();
      eos && (static_cast<int64_t>(*eos) < 0 ||
              static_cast<int64_t>(*eos) >= static_cast<int64_t>(getVocab())))
    return emitOpError() << "expected eos_token_id in [0, vocab = "
                         << getVocab() << "), got "
                         << static_cast<int64_t>(*eos);
  if (failed(verifyRoutingRule(
          *this, getExperts(), getTopK(),
          getRoutedScalingFactor().convertToFloat(), getNGroup(),
          getTopkGroup(), {"routed_scaling_factor", "n_group", "topk_group"})))
    return failure();
  if (!hfNamesOf(getFamily()))
    return emitOpError() << "unknown family '" << getFamily()
                         << "': expected one of " << knownFamilyList();
  float rate = getBiasUpdateRate().convertToFloat();
  std::pair<StringRef, float> nonNegatives[] = {
      {"bias_update_rate", rate},
      {"seq_aux_coef", getSeqAuxCoef().convertToFloat()},
      {"z_loss_coef", getZLossCoef().convertToFloat()}};
  for (auto [name, value] : nonNegatives)
    if (!(value >= 0.0f))
      return emitOpError() << "expected " << name << " >= 0, got "
                           << fmt(value);
  // moe.aux_loss recounts the selection as the top-k of the scores, which
  // sigmoid scoring's, group-limited routing's and a biased one are not.
  StringRef otherSelection = getScoring() == RouterScoring::sigmoid
                                 ? "sigmoid scoring"
                             : getNGroup() > 1 ? "n_group > 1"
                             : rate > 0.0f     ? "bias_update_rate > 0"
                                               : "";
  if (!otherSelection.empty() && getAuxCoef().convertToFloat() != 0.0f)
    return emitOpError()
           << "expected aux_coef = 0 with " << otherSelection
           << ": the load-balancing loss counts the top_k of the scores, "
              "which is not this router's selection; got "
           << fmt(getAuxCoef().convertToFloat());
  return verifyCapacityFactor(*this, getCapacityFactor().convertToFloat(),
                              getExperts());
}

//===----------------------------------------------------------------------===//
// Optimizer configuration and ops
//===----------------------------------------------------------------------===//

/// The AdamW hyper-parameter constraints shared by the config and the update.
static LogicalResult verifyAdamWHyperParams(Operation *op, float beta1,
                                            float beta2, float eps,
                                            float weightDecay) {
  if (!(beta1 >= 0 && beta1 < 1))
    return op->emitOpError() << "expected 0 <= beta1 < 1, got " << fmt(beta1);
  if (!(beta2 >= 0 && beta2 < 1))
    return op->emitOpError() << "expected 0 <= beta2 < 1, got " << fmt(beta2);
  if (!(eps > 0))
    return op->emitOpError() << "expected eps > 0, got " << fmt(eps);
  if (!(weightDecay >= 0))
    return op->emitOpError() << "expected weight_decay >= 0, got "
                             << fmt(weightDecay);
  return success();
}

static LogicalResult verifySchedule(Operation *op, float peak, float min,
                                    int64_t warmup, int64_t decay) {
  if (!(min >= 0 && peak >= min))
    return op->emitOpError() << "expected peak learning rate >= min >= 0, got "
                             << fmt(peak) << " and " << fmt(min);
  if (warmup < 0 || warmup > decay)
    return op->emitOpError() << "expected 0 <= warmup <= decay_steps, got "
                             << warmup << " and " << decay;
  return success();
}

LogicalResult AdamWConfigOp::verify() {
  if (failed(verifyAdamWHyperParams(
          *this, getBeta1().convertToFloat(), getBeta2().convertToFloat(),
          getEps().convertToFloat(), getWeightDecay().convertToFloat())))
    return failure();
  if (failed(verifySchedule(*this, getLr().convertToFloat(),
                            getMinLr().convertToFloat(), getWarmup(),
                            getDecaySteps())))
    return failure();
  if (!(getMaxGradNorm().convertToFloat() >= 0))
    return emitOpError() << "expected max_grad_norm >= 0, got "
                         << fmt(getMaxGradNorm().convertToFloat());
  return success();
}

LogicalResult GlobalNormOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "expected at least one input";
  ArrayAttr inputAxes = getInputAxesAttr();
  if (!inputAxes)
    return success();
  if (inputAxes.size() != getInputs().size())
    return emitOpError() << "expected one entry of input_axes per input, got "
                         << inputAxes.size() << " for " << getInputs().size()
                         << " inputs";
  for (Attribute axes : inputAxes)
    if (failed(verifyAxisNames(*this, "input_axes", cast<ArrayAttr>(axes))))
      return failure();
  return success();
}

LogicalResult ClipCoefficientOp::verify() {
  if (!(getMaxNorm().convertToFloat() >= 0))
    return emitOpError() << "expected max_norm >= 0, got "
                         << fmt(getMaxNorm().convertToFloat());
  return success();
}

LogicalResult LearningRateOp::verify() {
  return verifySchedule(*this, getPeak().convertToFloat(),
                        getMin().convertToFloat(), getWarmup(),
                        getDecaySteps());
}

LogicalResult AdamWUpdateOp::verify() {
  return verifyAdamWHyperParams(*this, getBeta1().convertToFloat(),
                                getBeta2().convertToFloat(),
                                getEps().convertToFloat(),
                                getWeightDecay().convertToFloat());
}

LogicalResult
AdamWUpdateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (getExpAvgAttr() == getExpAvgSqAttr())
    return emitOpError() << "expected exp_avg and exp_avg_sq to be different "
                            "parameters, got " << getExpAvgAttr() << " twice";
  if (static_cast<bool>(getMeshAttr()) !=
      static_cast<bool>(getGatherAxesAttr()))
    return emitOpError() << "expected mesh and gather_axes together";
  int64_t ranks = 1;
  if (getMeshAttr()) {
    FailureOr<int64_t> size =
        groupSize(*this, getMeshAttr(), *getGatherAxes(), symbolTable);
    if (failed(size))
      return failure();
    ranks = *size;
  }
  // ZeRO-1 gathers the copy the forward reads; the rest is the block.
  StringRef whole = getWorkingCopyAttr() ? "working_copy" : "param";
  std::tuple<StringRef, FlatSymbolRefAttr, ParamKind> refs[] = {
      {"param", getParamAttr(), ParamKind::weight},
      {"exp_avg", getExpAvgAttr(), ParamKind::optimizer_state},
      {"exp_avg_sq", getExpAvgSqAttr(), ParamKind::optimizer_state},
      {"working_copy", getWorkingCopyAttr(), ParamKind::working_copy}};
  auto grad = cast<RankedTensorType>(getGrad().getType());
  for (auto [role, ref, kind] : refs) {
    if (!ref)
      continue;
    auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, ref);
    if (!param)
      return emitOpError() << role << " " << ref
                           << " does not name a moe.param";
    if (param.getKind() != kind)
      return emitOpError() << role << " " << ref << " must be "
                           << (kind == ParamKind::weight ? "a weight"
                               : kind == ParamKind::working_copy
                                   ? "a working copy"
                                   : "optimizer state");
    if (kind == ParamKind::working_copy &&
        param.getMasterAttr() != getParamAttr())
      return emitOpError() << "working_copy " << ref
                           << " must be the working copy of " << getParamAttr();
    RankedTensorType type = param.getTensorType();
    SmallVector<int64_t> expected(grad.getShape());
    if (role == whole && !expected.empty())
      expected[0] *= ranks;
    if (type.getShape() != ArrayRef<int64_t>(expected) ||
        (kind != ParamKind::working_copy &&
         type.getElementType() != grad.getElementType()))
      return emitOpError()
             << role << " " << ref << " has type " << type
             << ", but the gradient has type " << grad
             << (role == whole && ranks > 1
                     ? llvm::formatv(" (a block of {0} ranks)", ranks).str()
                     : std::string());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getKind() == ParamKind::weight && getInit() == InitKind::none)
    return emitOpError() << "expected an initialisation for a weight "
                            "(zeros, ones or normal)";
  if (getInit() == InitKind::normal && !getInitStd())
    return emitOpError() << "expected init_std for normal initialisation";
  // The artifact carries init_std for a normal init only, and the runtime
  // refuses it elsewhere: a stray one is a mistake, not a setting.
  if (getInit() != InitKind::normal && getInitStd())
    return emitOpError() << "has init_std, which only a normal "
                            "initialisation reads";
  if (getInitStd() &&
      failed(verifyInitStd(*this, getInitStd()->convertToFloat())))
    return failure();
  if (getShardingOrigin() && !getSharding())
    return emitOpError() << "has sharding_origin without a sharding";
  if (getShardingOrigin() &&
      static_cast<int64_t>(getShardingOrigin()->size()) !=
          getTensorType().getRank())
    return emitOpError() << "expected one sharding_origin entry per "
                            "dimension, got "
                         << getShardingOrigin()->size() << " for rank "
                         << getTensorType().getRank();
  bool workingCopy = getKind() == ParamKind::working_copy;
  if (workingCopy != static_cast<bool>(getMasterAttr()))
    return emitOpError() << (workingCopy
                                 ? "expected a working copy to name its master"
                                 : "has a master, which only a working copy has");
  if (workingCopy && getInit() != InitKind::none)
    return emitOpError() << "expected no initialisation for a working copy "
                            "(the runtime rounds its master)";
  if (workingCopy != getTensorType().getElementType().isBF16())
    return emitOpError() << (workingCopy
                                 ? "expected a working copy of type bf16, got "
                                 : "expected an f32 tensor, got ")
                         << getType();
  if (getKind() != ParamKind::weight && !workingCopy &&
      getInit() != InitKind::zeros)
    return emitOpError() << "expected "
                         << (getKind() == ParamKind::optimizer_state
                                 ? "optimizer state"
                                 : "an fp8 amax history")
                         << " to be initialised with zeros";
  StringRef name = getSymName();
  size_t first = name.find("{e}");
  if (first != StringRef::npos) {
    if (name.find("{e}", first + 1) != StringRef::npos)
      return emitOpError() << "expected at most one '{e}' in the name";
    if (getTensorType().getRank() < 2)
      return emitOpError() << "expected stacked expert tensor '" << name
                           << "' to have rank >= 2";
  }
  return success();
}

std::optional<SmallVector<StringRef>>
mlir::moe::rowBlockAxes(ShardingAttr whole, ShardingAttr block, unsigned rank) {
  auto axesOf = [](ShardingAttr sharding, unsigned d) {
    return sharding ? sharding.axesOf(d) : SmallVector<StringRef>();
  };
  if (whole && block && whole.getMesh() != block.getMesh())
    return std::nullopt;
  SmallVector<StringRef> extra;
  for (unsigned d = 0; d < rank; ++d) {
    SmallVector<StringRef> mine = axesOf(whole, d), theirs = axesOf(block, d);
    if (d > 0) {
      if (mine != theirs)
        return std::nullopt;
      continue;
    }
    if (theirs.size() < mine.size() ||
        !llvm::equal(mine, ArrayRef<StringRef>(theirs).take_front(mine.size())))
      return std::nullopt;
    extra.assign(theirs.begin() + mine.size(), theirs.end());
  }
  return extra;
}

LogicalResult ParamOp::verifyMaster(SymbolTableCollection &symbols) {
  if (!getMasterAttr())
    return success();
  auto master = symbols.lookupNearestSymbolFrom<ParamOp>(*this, getMasterAttr());
  if (!master)
    return emitOpError() << "master " << getMasterAttr()
                         << " does not name a moe.param";
  if (master.getKind() != ParamKind::weight)
    return emitOpError() << "master " << getMasterAttr()
                         << " must be a weight";
  // The copy is stored where its master is, or (ZeRO-1) the master is a
  // block of the copy: dimension 0 split further over more axes, after the
  // copy's own. Partitioned, the master's shape is then that block's.
  ShardingAttr mine = getShardingAttr(), theirs = master.getShardingAttr();
  int64_t blocks = 1;
  if (mine != theirs) {
    std::optional<SmallVector<StringRef>> extra =
        rowBlockAxes(mine, theirs, getTensorType().getRank());
    auto mesh =
        theirs
            ? symbols.lookupNearestSymbolFrom<MeshOp>(*this, theirs.getMesh())
            : MeshOp();
    bool block = extra && !extra->empty() && mesh;
    for (StringRef axis : block ? *extra : SmallVector<StringRef>())
      if (std::optional<int64_t> size = mesh.getAxisSize(axis))
        blocks *= *size;
      else
        block = false;
    if (!block)
      return emitOpError() << "expected the sharding of its master "
                           << getMasterAttr()
                           << ", or the master's to split dimension 0 "
                              "further (ZeRO-1)";
  }
  auto module = (*this)->getParentOfType<ModuleOp>();
  bool partitioned = module && module->hasAttr(kPartitionedAttrName);
  SmallVector<int64_t> expected(getTensorType().getShape());
  if (partitioned && !expected.empty())
    expected[0] /= blocks;
  if (master.getTensorType().getShape() != ArrayRef<int64_t>(expected))
    return emitOpError() << "expected its master " << getMasterAttr()
                         << " of shape " << fmt(expected) << ", got "
                         << fmt(master.getTensorType().getShape());
  return success();
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError() << getParamAttr() << " does not name a moe.param";
  if (param.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " differs from the type of " << getParamAttr()
                         << ", " << param.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

/// tokens [B, S], table or its gradient [V, H], activation [B, S, H].
static LogicalResult verifyEmbeddingShapes(Operation *op, Value tokens,
                                           Value table, Value activation) {
  if (failed(expectRank(op, "tokens", tokens, 2)) ||
      failed(expectRank(op, "table", table, 2)))
    return failure();
  return expectShape(op, "embeddings", activation,
                     concat(shapeOf(tokens), shapeOf(table).back()));
}

LogicalResult EmbeddingOp::verify() {
  return verifyEmbeddingShapes(*this, getTokens(), getTable(), getResult());
}

LogicalResult EmbeddingGradOp::verify() {
  return verifyEmbeddingShapes(*this, getTokens(), getResult(), getGrad());
}

/// input [..., H], weight [H].
static LogicalResult verifyNormShapes(Operation *op, Value input, Value weight,
                                      float epsilon,
                                      std::optional<uint64_t> numHeads) {
  if (failed(expectMinRank(op, "input", input, 2)))
    return failure();
  int64_t width = shapeOf(input).back();
  if (numHeads) {
    int64_t heads = static_cast<int64_t>(*numHeads);
    if (heads < 1 || width % heads != 0)
      return op->emitOpError()
             << "expected num_heads >= 1 to divide the input's last dimension "
             << width << ", got " << heads;
    width /= heads;
  }
  if (failed(expectShape(op, "weight", weight, width)))
    return failure();
  if (!(epsilon > 0))
    return op->emitOpError() << "expected epsilon > 0, got " << fmt(epsilon);
  return success();
}

LogicalResult RMSNormOp::verify() {
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "expected the result to have the input's type";
  return verifyNormShapes(*this, getInput(), getWeight(),
                          getEpsilon().convertToFloat(), getNumHeads());
}

LogicalResult RMSNormGradOp::verify() {
  if (getGrad().getType() != getInput().getType() ||
      getInputGrad().getType() != getInput().getType())
    return emitOpError()
           << "expected grad and input_grad to have the input's type";
  // Gradients may be wider than the BF16 values they are of (fp32 weight
  // gradients of a BF16 working copy): only the shapes must agree.
  if (shapeOf(getWeightGrad()) != shapeOf(getWeight()))
    return emitOpError() << "expected weight_grad to have the weight's shape";
  return verifyNormShapes(*this, getInput(), getWeight(),
                          getEpsilon().convertToFloat(), getNumHeads());
}

/// x [..., K], weight [N, K], y [..., N].
static LogicalResult verifyLinearShapes(Operation *op, Value x, Value weight,
                                        Value y) {
  if (failed(expectMinRank(op, "input", x, 2)) ||
      failed(expectRank(op, "weight", weight, 2)))
    return failure();
  ArrayRef<int64_t> w = shapeOf(weight);
  if (shapeOf(x).back() != w[1])
    return op->emitOpError() << "expected the input's last dimension ("
                             << shapeOf(x).back()
                             << ") to match the weight's in-features ("
                             << w[1] << ")";
  return expectShape(op, "output", y,
                     concat(shapeOf(x).drop_back(), w[0]));
}

/// An epilogue's addend has the result's type.
static LogicalResult verifyAddend(Operation *op, Value addend, Value result) {
  if (addend && addend.getType() != result.getType())
    return op->emitOpError()
           << "expected the addend to have the result's "
              "type "
           << result.getType() << ", got " << addend.getType();
  return success();
}

LogicalResult LinearOp::verify() {
  if (failed(verifyAddend(*this, getAddend(), getResult())))
    return failure();
  return verifyLinearShapes(*this, getInput(), getWeight(), getResult());
}

LogicalResult LinearGradInputOp::verify() {
  if (failed(expectMinRank(*this, "grad", getGrad(), 2)) ||
      failed(expectRank(*this, "weight", getWeight(), 2)))
    return failure();
  if (failed(verifyAddend(*this, getAddend(), getResult())))
    return failure();
  ArrayRef<int64_t> w = shapeOf(getWeight());
  if (shapeOf(getGrad()).back() != w[0])
    return emitOpError() << "expected the grad's last dimension ("
                         << shapeOf(getGrad()).back()
                         << ") to match the weight's out-features (" << w[0]
                         << ")";
  return expectShape(*this, "input gradient", getResult(),
                     concat(shapeOf(getGrad()).drop_back(), w[1]));
}

LogicalResult LinearGradWeightOp::verify() {
  if (failed(expectMinRank(*this, "grad", getGrad(), 2)) ||
      failed(expectMinRank(*this, "input", getInput(), 2)))
    return failure();
  if (shapeOf(getGrad()).drop_back() != shapeOf(getInput()).drop_back())
    return emitOpError() << "expected grad and input to have the same leading "
                            "dimensions, got "
                         << fmt(shapeOf(getGrad())) << " and "
                         << fmt(shapeOf(getInput()));
  return expectShape(*this, "weight gradient", getResult(),
                     {shapeOf(getGrad()).back(), shapeOf(getInput()).back()});
}

/// input [B, S, heads * d] with d even.
static LogicalResult verifyRoPEShapes(Operation *op, Value input, Value result,
                                      int64_t numHeads, float theta) {
  if (result.getType() != input.getType())
    return op->emitOpError() << "expected the result to have the input's type";
  if (failed(expectRank(op, "input", input, 3)))
    return failure();
  int64_t width = shapeOf(input).back();
  if (numHeads <= 0)
    return op->emitOpError() << "expected num_heads > 0, got " << numHeads;
  if (width == 0)
    return op->emitOpError() << "expected a non-empty last dimension";
  if (width % numHeads != 0)
    return op->emitOpError() << "expected the last dimension (" << width
                             << ") to be divisible by num_heads (" << numHeads
                             << ")";
  if ((width / numHeads) % 2 != 0)
    return op->emitOpError() << "expected an even head dimension, got "
                             << width / numHeads;
  if (!(theta > 0))
    return op->emitOpError() << "expected theta > 0, got " << fmt(theta);
  return success();
}

/// The parts the sequence is split into over `sequence_axes` (1 without
/// them): axes of the module's mesh, each once, cp first if present.
static FailureOr<int64_t> sequenceParts(Operation *op,
                                        std::optional<ArrayAttr> axes) {
  if (!axes || axes->empty())
    return 1;
  auto module = op->getParentOfType<ModuleOp>();
  MeshOp mesh;
  if (module)
    for (MeshOp candidate : module.getOps<MeshOp>())
      mesh = candidate;
  if (!mesh)
    return op->emitOpError()
           << "has sequence_axes but its module has no moe.mesh";
  int64_t parts = 1;
  llvm::SmallSet<StringRef, 4> seen;
  for (auto [i, axis] : llvm::enumerate(axes->getAsValueRange<StringAttr>())) {
    std::optional<int64_t> size = mesh.getAxisSize(axis);
    if (!size) {
      InFlightDiagnostic error = op->emitOpError();
      error << "sequence_axes names '" << axis
            << "', which the mesh does not have; its axes are ";
      llvm::interleaveComma(mesh.getAxes().getAsValueRange<StringAttr>(),
                            error);
      return error;
    }
    if (!seen.insert(axis).second)
      return op->emitOpError() << "sequence_axes names '" << axis << "' twice";
    if (axis == kContextAxis && i != 0)
      return op->emitOpError()
             << "sequence_axes must start with '" << kContextAxis
             << "' when they name it: its load-balanced split is outermost";
    parts *= *size;
  }
  return parts;
}

/// Document masking's positions: [B, S] of a [B, S, X] activation.
static LogicalResult verifyPositions(Operation *op, Value positions,
                                     Value activation) {
  if (!positions)
    return success();
  ArrayRef<int64_t> shape = shapeOf(activation);
  return expectShape(op, "positions", positions, {shape[0], shape[1]});
}

LogicalResult RoPEOp::verify() {
  if (failed(verifyRoPEShapes(*this, getInput(), getResult(), getNumHeads(),
                              getTheta().convertToFloat())) ||
      failed(sequenceParts(*this, getSequenceAxes())))
    return failure();
  return verifyPositions(*this, getPositions(), getInput());
}

LogicalResult RoPEGradOp::verify() {
  if (failed(verifyRoPEShapes(*this, getGrad(), getResult(), getNumHeads(),
                              getTheta().convertToFloat())) ||
      failed(sequenceParts(*this, getSequenceAxes())))
    return failure();
  return verifyPositions(*this, getPositions(), getGrad());
}

/// q [B, S, heads*d], k/v [B, S * parts, kv*d] (the whole sequence of
/// which the queries are a block), out like q, lse [B, heads, S].
static LogicalResult verifyAttentionShapes(Operation *op, Value q, Value k,
                                           Value v, Value out, Value lse,
                                           int64_t heads, int64_t kvHeads,
                                           std::optional<ArrayAttr> axes,
                                           bool ring) {
  FailureOr<int64_t> parts = sequenceParts(op, axes);
  if (failed(parts))
    return failure();
  if (ring && (!axes || axes->empty()))
    return op->emitOpError()
           << "has ring but no sequence_axes to pass the blocks around";
  if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0)
    return op->emitOpError() << "expected num_heads (" << heads
                             << ") to be a positive multiple of num_kv_heads ("
                             << kvHeads << ")";
  if (failed(expectRank(op, "query", q, 3)))
    return failure();
  ArrayRef<int64_t> qs = shapeOf(q);
  if (qs[2] % heads != 0)
    return op->emitOpError() << "expected the query width (" << qs[2]
                             << ") to be divisible by num_heads (" << heads
                             << ")";
  int64_t headDim = qs[2] / heads;
  if (headDim == 0)
    return op->emitOpError() << "expected a non-empty head dimension";
  // A ring's keys are the rank's block, as its queries.
  int64_t keys = ring ? qs[1] : qs[1] * *parts;
  SmallVector<int64_t> kvShape = {qs[0], keys, kvHeads * headDim};
  if (failed(expectShape(op, "key", k, kvShape)) ||
      failed(expectRank(op, "value", v, 3)))
    return failure();
  // The values may have a head dimension of their own (MLA's v_head_dim).
  ArrayRef<int64_t> vs = shapeOf(v);
  if (vs[0] != qs[0] || vs[1] != keys || vs[2] % kvHeads != 0 || vs[2] == 0)
    return op->emitOpError() << "expected value of shape [" << qs[0] << ", "
                             << keys << ", num_kv_heads (" << kvHeads
                             << ") * a positive head dim], got " << fmt(vs);
  int64_t valueDim = vs[2] / kvHeads;
  if (failed(expectShape(op, "output", out, {qs[0], qs[1], heads * valueDim})))
    return failure();
  return expectShape(op, "lse", lse, {qs[0], heads, qs[1]});
}

/// The softmax scale's factor, when given, is positive.
static LogicalResult verifyScaleFactor(Operation *op,
                                       std::optional<APFloat> factor) {
  if (factor && !(factor->convertToFloat() > 0))
    return op->emitOpError() << "expected scale_factor > 0, got "
                             << fmt(factor->convertToFloat());
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionShapes(
          *this, getQuery(), getKey(), getValue(), getOutput(), getLse(),
          getNumHeads(), getNumKvHeads(), getSequenceAxes(), getRing())) ||
      failed(verifyScaleFactor(*this, getScaleFactor())))
    return failure();
  return verifyPositions(*this, getPositions(), getQuery());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionShapes(
          *this, getQuery(), getKey(), getValue(), getOutput(), getLse(),
          getNumHeads(), getNumKvHeads(), getSequenceAxes(), getRing())) ||
      failed(verifyScaleFactor(*this, getScaleFactor())))
    return failure();
  if (getGrad().getType() != getOutput().getType())
    return emitOpError() << "expected grad to have the output's type";
  if (getQueryGrad().getType() != getQuery().getType() ||
      getKeyGrad().getType() != getKey().getType() ||
      getValueGrad().getType() != getValue().getType())
    return emitOpError()
           << "expected the gradients to have the types of query, key, value";
  return verifyPositions(*this, getPositions(), getQuery());
}

/// Whether `rhs` is one part shared by the heads: `whole` is lhs plus
/// num_heads of it (else, per head, lhs plus rhs).
static bool isSharedPart(Value whole, Value lhs, Value rhs, int64_t heads) {
  std::optional<::moe::rt::HeadParts> parts = ::moe::rt::headPartsOf(
      heads, shapeOf(lhs).back(), shapeOf(rhs).back(), shapeOf(whole).back());
  return parts && parts->sharedB;
}

/// A per-head concatenation's parts and whole (moe.concat_heads,
/// moe.split_heads).
static LogicalResult verifyHeadParts(Operation *op, Value whole, Value lhs,
                                     Value rhs, int64_t heads) {
  if (heads < 1)
    return op->emitOpError() << "expected num_heads >= 1, got " << heads;
  for (auto [what, value] :
       {std::make_pair("lhs", lhs), std::make_pair("rhs", rhs)}) {
    if (failed(expectMinRank(op, what, value, 1)))
      return failure();
    if (shapeOf(value).drop_back() != shapeOf(whole).drop_back() ||
        getElementTypeOrSelf(value) != getElementTypeOrSelf(whole))
      return op->emitOpError()
             << "expected " << what << " with the leading dimensions "
             << fmt(shapeOf(whole).drop_back()) << " and element type "
             << getElementTypeOrSelf(whole) << ", got " << value.getType();
  }
  int64_t total = shapeOf(whole).back(), first = shapeOf(lhs).back();
  int64_t second = shapeOf(rhs).back();
  if (first % heads != 0)
    return op->emitOpError() << "expected lhs of num_heads (" << heads
                             << ") parts, got width " << first;
  if (!::moe::rt::headPartsOf(heads, first, second, total))
    return op->emitOpError()
           << "expected the whole of width " << first << " + " << second
           << " (rhs per head) or " << first << " + " << heads << " * "
           << second << " (rhs shared), got " << total;
  return success();
}

LogicalResult ConcatHeadsOp::verify() {
  return verifyHeadParts(*this, getResult(), getLhs(), getRhs(), getNumHeads());
}

bool ConcatHeadsOp::hasSharedRhs() {
  return isSharedPart(getResult(), getLhs(), getRhs(), getNumHeads());
}

LogicalResult SplitHeadsOp::verify() {
  return verifyHeadParts(*this, getInput(), getLhs(), getRhs(), getNumHeads());
}

bool SplitHeadsOp::hasSharedRhs() {
  return isSharedPart(getInput(), getLhs(), getRhs(), getNumHeads());
}

/// probs [..., E], weights [..., k] (f32), indices [..., k] (i32).
static LogicalResult verifyRoutingShapes(Operation *op, Value probs,
                                         Value weights, int64_t topK) {
  if (failed(expectMinRank(op, "probs", probs, 2)))
    return failure();
  ArrayRef<int64_t> p = shapeOf(probs);
  if (failed(expectTopK(op, topK, p.back())))
    return failure();
  return expectShape(op, "routing weights", weights,
                     concat(p.drop_back(), topK));
}

/// The bias (when present) is one value per expert, and the selection
/// rule holds (moe.router and moe.router_grad share both).
template <typename RouterLikeOp>
static LogicalResult verifyRouterRule(RouterLikeOp op, int64_t experts) {
  if (Value bias = op.getBias())
    if (failed(expectShape(op, "bias", bias, {experts})))
      return failure();
  return verifyRoutingRule(
      op, experts, op.getTopK(), op.getScale().convertToFloat(), op.getGroups(),
      op.getTopGroups(), {"scale", "groups", "top_groups"});
}

/// HF Mixtral's router is the default of every selection attribute.
template <typename RouterLikeOp> static bool isMixtralRule(RouterLikeOp op) {
  return !op.getBias() && op.getScoring() == RouterScoring::softmax &&
         op.getNormalize() && op.getScale().convertToFloat() == 1.0f &&
         op.getGroups() == 1 && op.getTopGroups() == 1;
}

bool RouterOp::isMixtralRouter() { return isMixtralRule(*this); }
bool RouterGradOp::isMixtralRouter() { return isMixtralRule(*this); }

LogicalResult RouterOp::verify() {
  if (getProbs().getType() != getLogits().getType())
    return emitOpError() << "expected probs to have the logits' type";
  if (failed(verifyRoutingShapes(*this, getLogits(), getWeights(), getTopK())))
    return failure();
  if (failed(expectShape(*this, "indices", getIndices(),
                         shapeOf(getWeights()))))
    return failure();
  int64_t experts = shapeOf(getLogits()).back();
  if (failed(verifyRouterRule(*this, experts)))
    return failure();
  return verifyCapacityFactor(*this, getCapacityFactor().convertToFloat(),
                              experts);
}

LogicalResult RouterGradOp::verify() {
  if (getResult().getType() != getProbs().getType() ||
      (getProbsGrad() && getProbsGrad().getType() != getProbs().getType()))
    return emitOpError()
           << "expected probs_grad and the result to have the probs' type";
  if (failed(
          verifyRoutingShapes(*this, getProbs(), getWeightsGrad(), getTopK())))
    return failure();
  return verifyRouterRule(*this, shapeOf(getProbs()).back());
}

/// x [..., H], weights/indices [..., k], w1/w3 [E, F, H], w2 [E, H, F].
static LogicalResult verifyExpertsShapes(Operation *op, Value x, Value weights,
                                         Value indices, Value w1, Value w3,
                                         Value w2, bool distributed) {
  if (failed(expectMinRank(op, "input", x, 2)) ||
      failed(expectMinRank(op, "routing weights", weights, 2)) ||
      failed(expectRank(op, "w1", w1, 3)))
    return failure();
  ArrayRef<int64_t> xs = shapeOf(x), ws = shapeOf(weights), w1s = shapeOf(w1);
  if (xs.drop_back() != ws.drop_back())
    return op->emitOpError()
           << "expected routing weights with the input's leading dimensions, "
              "got "
           << fmt(ws) << " for input " << fmt(xs);
  if (failed(expectShape(op, "indices", indices, ws)))
    return failure();
  int64_t experts = w1s[0], ffn = w1s[1], hidden = xs.back();
  if (failed(expectShape(op, "w1", w1, {experts, ffn, hidden})) ||
      failed(expectShape(op, "w3", w3, {experts, ffn, hidden})) ||
      failed(expectShape(op, "w2", w2, {experts, hidden, ffn})))
    return failure();
  // Distributed experts hold a share of E here; the router checked top_k
  // against all of them.
  return distributed ? success() : expectTopK(op, ws.back(), experts);
}

/// `fp8_block` is the block of blockwise FP8 scaling or of an FP8 dispatch
/// alone, and positive; delayed scaling, and only it, has an amax history.
static LogicalResult verifyFp8Recipe(Operation *op,
                                     std::optional<Fp8Scaling> scaling,
                                     std::optional<uint64_t> block,
                                     bool dispatch, FlatSymbolRefAttr history) {
  if ((scaling == Fp8Scaling::delayed) != static_cast<bool>(history))
    return op->emitOpError()
           << (history ? "has fp8_history without fp8 = #moe.fp8<delayed>"
                       : "expected fp8_history with fp8 = #moe.fp8<delayed>");
  if (!block)
    return success();
  if (scaling != Fp8Scaling::blockwise && !(dispatch && !scaling))
    return op->emitOpError() << "has fp8_block without fp8 = "
                                "#moe.fp8<blockwise> or fp8_dispatch alone";
  if (static_cast<int64_t>(*block) <= 0 || *block > 65536)
    return op->emitOpError() << "expected fp8_block in [1, 65536], found "
                             << static_cast<int64_t>(*block);
  return success();
}

/// An amax history is a moe.param of kind fp8_history, [E, 9, L >= 2] for
/// the op's experts (`localExperts` per rank when they are distributed).
static LogicalResult verifyFp8History(Operation *op, FlatSymbolRefAttr ref,
                                      Value w1, bool distributed,
                                      SymbolTableCollection &symbols) {
  if (!ref)
    return success();
  auto history = symbols.lookupNearestSymbolFrom<ParamOp>(op, ref);
  if (!history || history.getKind() != ParamKind::fp8_history)
    return op->emitOpError()
           << "fp8_history " << ref
           << " does not name a moe.param of kind fp8_history";
  ArrayRef<int64_t> shape = history.getTensorType().getShape();
  int64_t local = cast<ShapedType>(w1.getType()).getDimSize(0);
  bool expertsMatch = shape.size() == 3 &&
                      (distributed ? local > 0 && shape[0] % local == 0
                                   : shape[0] == local);
  if (!expertsMatch || shape[1] != kFp8HistoryRoles || shape[2] < 2)
    return op->emitOpError()
           << "expected fp8_history " << ref << " of shape [" << local
           << (distributed ? " x ranks" : "") << ", " << kFp8HistoryRoles
           << ", L >= 2], got " << history.getTensorType();
  return success();
}

/// Delayed FP8 scaling reads and updates the amax history; otherwise the
/// op has no side effects.
static void fp8HistoryEffects(
    FlatSymbolRefAttr history,
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  if (!history)
    return;
  effects.emplace_back(MemoryEffects::Read::get());
  effects.emplace_back(MemoryEffects::Write::get());
}

void ExpertsOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  fp8HistoryEffects(getFp8HistoryAttr(), effects);
}

void ExpertsGradOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  fp8HistoryEffects(getFp8HistoryAttr(), effects);
}

LogicalResult ExpertsOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyFp8History(*this, getFp8HistoryAttr(), getW1(),
                          static_cast<bool>(getExpertAxes()), symbols);
}

LogicalResult ExpertsGradOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyFp8History(*this, getFp8HistoryAttr(), getW1(),
                          static_cast<bool>(getExpertAxes()), symbols);
}

/// The saved up projections, when present: f32 [..., k, 2, F] (the
/// indices' shape, then w1's F), on the experts' own rank.
static LogicalResult verifyExpertHidden(Operation *op, Value hidden,
                                        Value indices, Value w1,
                                        bool distributed) {
  if (!hidden)
    return success();
  if (distributed)
    return op->emitOpError()
           << "cannot keep the experts' up projections ('hidden') with "
              "expert_axes: they would live on the experts' ranks";
  SmallVector<int64_t> expected(shapeOf(indices));
  expected.push_back(2);
  expected.push_back(shapeOf(w1)[1]);
  return expectShape(op, "hidden", hidden, expected);
}

LogicalResult ExpertsOp::verify() {
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "expected the result to have the input's type";
  if (failed(verifyAxisNames(*this, "expert_axes", getExpertAxes())))
    return failure();
  if (failed(verifyFp8Recipe(*this, getFp8(), getFp8Block(), getFp8Dispatch(),
                             getFp8HistoryAttr())))
    return failure();
  if (failed(verifyExpertsShapes(*this, getInput(), getWeights(), getIndices(),
                                 getW1(), getW3(), getW2(),
                                 static_cast<bool>(getExpertAxes()))))
    return failure();
  return verifyExpertHidden(*this, getHidden(), getIndices(), getW1(),
                            static_cast<bool>(getExpertAxes()));
}

LogicalResult ExpertsGradOp::verify() {
  if (failed(verifyAxisNames(*this, "expert_axes", getExpertAxes())))
    return failure();
  if (failed(verifyFp8Recipe(*this, getFp8(), getFp8Block(), getFp8Dispatch(),
                             getFp8HistoryAttr())))
    return failure();
  if (failed(verifyExpertsShapes(*this, getInput(), getWeights(), getIndices(),
                                 getW1(), getW3(), getW2(),
                                 static_cast<bool>(getExpertAxes()))))
    return failure();
  if (failed(verifyExpertHidden(*this, getHidden(), getIndices(), getW1(),
                                static_cast<bool>(getExpertAxes()))))
    return failure();
  if (getGrad().getType() != getInput().getType())
    return emitOpError() << "expected grad to have the input's type";
  // Weight gradients may be fp32 for BF16 weights: only their shapes
  // must agree.
  if (getInputGrad().getType() != getInput().getType() ||
      getWeightsGrad().getType() != getWeights().getType() ||
      shapeOf(getW1Grad()) != shapeOf(getW1()) ||
      shapeOf(getW3Grad()) != shapeOf(getW3()) ||
      shapeOf(getW2Grad()) != shapeOf(getW2()))
    return emitOpError() << "expected the gradients to have the types of "
                            "input and weights and the shapes of w1, w3, w2";
  return success();
}

/// logits [..., V], targets [...].
static LogicalResult verifyCrossEntropyShapes(Operation *op, Value logits,
                                              Value targets) {
  if (failed(expectMinRank(op, "logits", logits, 2)))
    return failure();
  return expectShape(op, "targets", targets, shapeOf(logits).drop_back());
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return verifyCrossEntropyShapes(*this, getLogits(), getTargets());
}

LogicalResult CrossEntropyGradOp::verify() {
  if (getResult().getType() != getLogits().getType())
    return emitOpError() << "expected the result to have the logits' type";
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return verifyCrossEntropyShapes(*this, getLogits(), getTargets());
}

/// input [..., H], weight [V, H], targets and lse [...].
static LogicalResult verifyLinearCrossEntropyShapes(Operation *op, Value input,
                                                    Value weight, Value targets,
                                                    Value lse) {
  if (failed(expectMinRank(op, "input", input, 2)) ||
      failed(expectRank(op, "weight", weight, 2)))
    return failure();
  ArrayRef<int64_t> w = shapeOf(weight);
  if (shapeOf(input).back() != w[1])
    return op->emitOpError()
           << "expected the input's last dimension (" << shapeOf(input).back()
           << ") to match the weight's hidden size (" << w[1] << ")";
  ArrayRef<int64_t> tokens = shapeOf(input).drop_back();
  if (failed(expectShape(op, "targets", targets, tokens)))
    return failure();
  return expectShape(op, "lse", lse, tokens);
}

LogicalResult LinearCrossEntropyOp::verify() {
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return verifyLinearCrossEntropyShapes(*this, getInput(), getWeight(),
                                        getTargets(), getLse());
}

LogicalResult LinearCrossEntropyGradOp::verify() {
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  if (getInputGrad().getType() != getInput().getType())
    return emitOpError() << "expected input_grad to have the input's type";
  // An fp32 gradient of a BF16 working copy: only the shapes must agree.
  if (shapeOf(getWeightGrad()) != shapeOf(getWeight()))
    return emitOpError() << "expected weight_grad to have the weight's shape";
  return verifyLinearCrossEntropyShapes(*this, getInput(), getWeight(),
                                        getTargets(), getLse());
}

static LogicalResult verifyAuxLossShapes(Operation *op, Value probs,
                                         int64_t topK) {
  if (failed(expectMinRank(op, "probs", probs, 2)))
    return failure();
  return expectTopK(op, topK, shapeOf(probs).back());
}

/// A router's load counter and, optionally, its selection bias with a
/// positive rate (moe.expert_load, moe.expert_load_update).
static LogicalResult verifyBalancingRate(Operation *op, FlatSymbolRefAttr bias,
                                         float rate, StringRef rateName) {
  if (bias && !(rate > 0.0f))
    return op->emitOpError()
           << "expected " << rateName << " > 0 with a bias, got " << fmt(rate);
  if (!bias && rate != 0.0f)
    return op->emitOpError() << "expected " << rateName
                             << " = 0 without a bias, got " << fmt(rate);
  return success();
}

static LogicalResult verifyLoadSymbols(Operation *op, FlatSymbolRefAttr load,
                                       FlatSymbolRefAttr bias,
                                       SymbolTableCollection &symbols) {
  auto counts = symbols.lookupNearestSymbolFrom<ParamOp>(op, load);
  if (!counts || counts.getKind() != ParamKind::expert_load)
    return op->emitOpError()
           << "load " << load << " does not name a moe.param of kind "
           << "expert_load";
  if (counts.getTensorType().getRank() != 1)
    return op->emitOpError()
           << "expected load " << load << " of shape [experts], got "
           << counts.getTensorType();
  if (!bias)
    return success();
  auto steer = symbols.lookupNearestSymbolFrom<ParamOp>(op, bias);
  if (!steer || steer.getKind() != ParamKind::router_bias)
    return op->emitOpError()
           << "bias " << bias << " does not name a moe.param of kind "
           << "router_bias";
  if (steer.getTensorType() != counts.getTensorType())
    return op->emitOpError()
           << "expected bias " << bias << " of type " << counts.getTensorType()
           << ", got " << steer.getTensorType();
  return success();
}

LogicalResult ExpertLoadOp::verify() {
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())) ||
      failed(expectMinRank(*this, "indices", getIndices(), 2)))
    return failure();
  return verifyBalancingRate(*this, getBiasAttr(),
                             getBiasUpdateRate().convertToFloat(),
                             "bias_update_rate");
}

LogicalResult ExpertLoadOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyLoadSymbols(*this, getLoadAttr(), getBiasAttr(), symbols);
}

LogicalResult
ExpertLoadUpdateOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(verifyBalancingRate(*this, getBiasAttr(),
                                 getRate().convertToFloat(), "rate")))
    return failure();
  return verifyLoadSymbols(*this, getLoadAttr(), getBiasAttr(), symbols);
}

LogicalResult AuxLossOp::verify() {
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return verifyAuxLossShapes(*this, getProbs(), getTopK());
}

LogicalResult AuxLossGradOp::verify() {
  if (getResult().getType() != getProbs().getType())
    return emitOpError() << "expected the result to have the probs' type";
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return verifyAuxLossShapes(*this, getProbs(), getTopK());
}

/// probs [B, S, E] and indices [B, S, K], 1 <= K <= E, with each axis
/// list valid and no axis splitting both the sequences and their tokens.
static LogicalResult
verifySequenceAuxLoss(Operation *op, Value probs, Value indices,
                      std::optional<ArrayAttr> batchAxes,
                      std::optional<ArrayAttr> sequenceAxes) {
  if (failed(verifyAxisNames(op, "batch_axes", batchAxes)) ||
      failed(verifyAxisNames(op, "sequence_axes", sequenceAxes)) ||
      failed(expectRank(op, "probs", probs, 3)) ||
      failed(expectRank(op, "indices", indices, 3)))
    return failure();
  if (batchAxes && sequenceAxes)
    for (StringRef axis : batchAxes->getAsValueRange<StringAttr>())
      if (llvm::is_contained(sequenceAxes->getAsValueRange<StringAttr>(), axis))
        return op->emitOpError() << "axis '" << axis
                                 << "' splits both the batch and the sequence";
  ArrayRef<int64_t> p = shapeOf(probs), i = shapeOf(indices);
  if (p.take_front(2) != i.take_front(2))
    return op->emitOpError()
           << "expected indices with the probs' batch and sequence "
           << fmt(p.take_front(2)) << ", got " << fmt(i);
  if (!(i[2] >= 1 && i[2] <= p[2]))
    return op->emitOpError() << "expected 1 <= K <= " << p[2]
                             << " (experts) slots per token, got " << i[2];
  return success();
}

LogicalResult SequenceAuxLossOp::verify() {
  return verifySequenceAuxLoss(*this, getProbs(), getIndices(), getBatchAxes(),
                               getSequenceAxes());
}

LogicalResult SequenceAuxLossGradOp::verify() {
  if (getResult().getType() != getProbs().getType())
    return emitOpError() << "expected the result to have the probs' type";
  return verifySequenceAuxLoss(*this, getProbs(), getIndices(), getBatchAxes(),
                               getSequenceAxes());
}

LogicalResult ZLossOp::verify() {
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return expectMinRank(*this, "logits", getLogits(), 2);
}

LogicalResult ZLossGradOp::verify() {
  if (getResult().getType() != getLogits().getType())
    return emitOpError() << "expected the result to have the logits' type";
  if (failed(verifyAxisNames(*this, "token_axes", getTokenAxes())))
    return failure();
  return expectMinRank(*this, "logits", getLogits(), 2);
}

LogicalResult WeightedSumOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "expected at least one input";
  if (getCoefficients().size() != getInputs().size())
    return emitOpError() << "expected one coefficient per input, got "
                         << getCoefficients().size() << " for "
                         << getInputs().size() << " inputs";
  return success();
}

LogicalResult CastOp::verify() {
  auto input = getInput().getType(), result = getResult().getType();
  if (input.getShape() != result.getShape())
    return emitOpError() << "expected the result to have the input's shape "
                         << fmt(input.getShape()) << ", got "
                         << fmt(result.getShape());
  if (input.getElementType() == result.getElementType())
    return emitOpError() << "expected the result to have the other element "
                            "type than the input's "
                         << input.getElementType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) {
  return DenseElementsAttr::get(cast<ShapedType>(getType()),
                                ArrayRef<Attribute>(getValueAttr()));
}

Operation *MoEDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto splat = dyn_cast<SplatElementsAttr>(value);
  if (!splat || !splat.getElementType().isF32() ||
      !isa<RankedTensorType>(type) || !cast<RankedTensorType>(type).hasStaticShape())
    return nullptr;
  return builder.create<ConstantOp>(loc, type,
                                    splat.getSplatValue<FloatAttr>());
}

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/IR/MoEOps.cpp.inc"
