//===- HfRope.cpp - an HF config's RoPE and its scaling
//---------------------===//
//
// rope_theta and rope_scaling (transformers 4) or rope_parameters (5) as
// HF's rotary embedding computes them (modeling_rope_utils): the kinds moec
// implements become #moe.rope_scaling, with YaRN's attention factor and
// DeepSeek's softmax-scale correction resolved here.
//
//===----------------------------------------------------------------------===//
#include "HfRope.h"

#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::import;
namespace json = llvm::json;

namespace {

/// YaRN's mscale (the paper's eq. 21, HF's yarn_get_mscale).
double yarnMscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

/// The keys each rope_type of HF's reads (modeling_rope_utils'
/// _validate_*_rope_parameters), besides rope_type, type and rope_theta.
ArrayRef<StringLiteral> ropeKeysOf(StringRef type) {
  static constexpr StringLiteral kNone[] = {"partial_rotary_factor"};
  static constexpr StringLiteral kFactor[] = {"factor",
                                              "partial_rotary_factor"};
  static constexpr StringLiteral kYarn[] = {"factor",
                                            "original_max_position_embeddings",
                                            "beta_fast",
                                            "beta_slow",
                                            "mscale",
                                            "mscale_all_dim",
                                            "truncate",
                                            "attention_factor",
                                            "partial_rotary_factor"};
  static constexpr StringLiteral kLlama3[] = {
      "factor", "original_max_position_embeddings", "low_freq_factor",
      "high_freq_factor", "partial_rotary_factor"};
  if (type == "default")
    return kNone;
  if (type == "linear" || type == "dynamic")
    return kFactor;
  if (type == "yarn")
    return kYarn;
  return kLlama3;
}

} // namespace

void mlir::moe::import::readRope(ConfigReader &reader, Attributes &attrs,
                                 HfImport &result, double fallbackTheta,
                                 bool scalesSoftmax) {
  double theta = reader.number("rope_theta", fallbackTheta).value_or(0);
  StringRef field = "rope_parameters";
  const json::Value *parameters = reader.get("rope_parameters");
  if (const json::Value *scaling = reader.get("rope_scaling")) {
    if (parameters) {
      reader.fail("rope_scaling",
                  "given with rope_parameters (transformers 5's name for "
                  "it); keep one");
      return;
    }
    field = "rope_scaling";
    parameters = scaling;
  }
  if (!parameters) {
    attrs.number("rope_theta", theta);
    return;
  }
  const json::Object *object = parameters->getAsObject();
  if (!object) {
    reader.fail(field, "expected an object");
    return;
  }
  auto where = [&](StringRef key) { return (field + "." + key).str(); };
  // A key given null is absent, as HF's .get() reads it.
  auto value = [&](StringRef key) -> const json::Value * {
    const json::Value *v = object->get(key);
    return v && v->kind() != json::Value::Null ? v : nullptr;
  };
  auto number = [&](StringRef key) -> std::optional<double> {
    const json::Value *v = value(key);
    if (!v)
      return std::nullopt;
    std::optional<double> n = v->getAsNumber();
    if (!n || !std::isfinite(*n))
      reader.fail(where(key), "expected a number");
    return n;
  };
  // rope_type, or transformers 4's type; both must agree.
  std::optional<StringRef> type, oldType;
  if (const json::Value *v = value("rope_type"))
    if (!(type = v->getAsString()))
      reader.fail(where("rope_type"), "expected a string");
  if (const json::Value *v = value("type"))
    if (!(oldType = v->getAsString()))
      reader.fail(where("type"), "expected a string");
  if (type && oldType && *type != *oldType)
    reader.fail(where("type"), llvm::formatv("'{0}' differs from rope_type "
                                             "'{1}'",
                                             *oldType, *type));
  StringRef kind = type ? *type : oldType.value_or("default");
  StringRef typeKey = type ? "rope_type" : "type";
  constexpr StringLiteral kKinds[] = {"default", "linear", "dynamic", "yarn",
                                      "llama3"};
  if (!llvm::is_contained(kKinds, kind)) {
    reader.fail(where(typeKey),
                llvm::formatv("'{0}' is not implemented (moec implements "
                              "default, linear, dynamic, yarn and llama3)",
                              kind));
    return;
  }
  if (std::optional<double> t = number("rope_theta"))
    theta = *t;
  attrs.number("rope_theta", theta);
  // Every key is one the type reads.
  for (const auto &[key, v] : *object) {
    StringRef name = key;
    if (name == "rope_type" || name == "type" || name == "rope_theta" ||
        llvm::is_contained(ropeKeysOf(kind), name))
      continue;
    SmallVector<StringRef> known = {"rope_type", "type", "rope_theta"};
    llvm::append_range(known, ropeKeysOf(kind));
    reader.fail(where(name), llvm::formatv("not a parameter of rope_type "
                                           "'{0}'; its parameters: {1}",
                                           kind, llvm::join(known, ", ")));
    return;
  }
  if (std::optional<double> partial = number("partial_rotary_factor");
      partial && *partial != 1.0)
    reader.fail(where("partial_rotary_factor"),
                "moec implements 1 only (every head feature rotated)");
  if (kind == "default")
    return;
  std::optional<double> factor = number("factor");
  if (!factor) {
    reader.fail(where("factor"), "missing");
    return;
  }
  if (*factor < 1) {
    reader.fail(where("factor"),
                llvm::formatv("expected >= 1, got {0}", *factor));
    return;
  }
  if (kind == "dynamic") {
    // HF rescales only past max_position_embeddings, which --seq may not
    // exceed: the step's RoPE is unscaled.
    if (!reader.has("max_position_embeddings")) {
      reader.fail(where(typeKey),
                  "'dynamic' needs max_position_embeddings, past which HF "
                  "rescales the frequencies");
      return;
    }
    result.notes.push_back(
        "rope_type 'dynamic': HF rescales RoPE only for sequences longer "
        "than max_position_embeddings, which --seq is not; the step uses "
        "unscaled RoPE");
    return;
  }
  // The pretraining context: given, else max_position_embeddings (as
  // transformers' standardize_rope_params fills it).
  int64_t original = 0;
  if (kind == "yarn" || kind == "llama3") {
    std::optional<int64_t> given;
    if (const json::Value *v = value("original_max_position_embeddings")) {
      given = v->getAsInteger();
      if (!given || *given < 1) {
        reader.fail(where("original_max_position_embeddings"),
                    "expected a positive integer");
        return;
      }
    } else if (reader.has("max_position_embeddings")) {
      given = reader.integer("max_position_embeddings");
    }
    if (!given || *given < 1) {
      reader.fail(where("original_max_position_embeddings"), "missing");
      return;
    }
    original = *given;
  }
  MLIRContext *context = attrs.context();
  RopeScalingAttr scaling;
  if (kind == "linear") {
    scaling = RopeScalingAttr::get(context, RopeScalingKind::linear, *factor, 0,
                                   0.0, 0.0, true, 0.0, 0.0, 1.0);
  } else if (kind == "llama3") {
    std::optional<double> low = number("low_freq_factor");
    std::optional<double> high = number("high_freq_factor");
    if (!low || !high) {
      reader.fail(where(low ? "high_freq_factor" : "low_freq_factor"),
                  "missing");
      return;
    }
    if (!(*low > 0) || *high <= *low) {
      reader.fail(where("high_freq_factor"),
                  llvm::formatv("expected 0 < low_freq_factor ({0}) < "
                                "high_freq_factor ({1})",
                                *low, *high));
      return;
    }
    scaling = RopeScalingAttr::get(context, RopeScalingKind::llama3, *factor,
                                   original, 0.0, 0.0, true, *low, *high, 1.0);
  } else {
    // YaRN, with HF's defaults: beta_fast 32 and beta_slow 1 where absent or
    // 0, truncate true, and the attention factor from mscale and
    // mscale_all_dim, or from the factor alone.
    double betaFast = number("beta_fast").value_or(0);
    double betaSlow = number("beta_slow").value_or(0);
    betaFast = betaFast != 0 ? betaFast : 32.0;
    betaSlow = betaSlow != 0 ? betaSlow : 1.0;
    if (!(betaSlow > 0) || betaFast < betaSlow) {
      reader.fail(where("beta_fast"),
                  llvm::formatv("expected 0 < beta_slow ({0}) <= beta_fast "
                                "({1})",
                                betaSlow, betaFast));
      return;
    }
    bool truncate = true;
    if (const json::Value *v = value("truncate")) {
      std::optional<bool> flag = v->getAsBoolean();
      if (!flag)
        reader.fail(where("truncate"), "expected true or false");
      truncate = flag.value_or(true);
    }
    double mscale = number("mscale").value_or(0);
    double mscaleAllDim = number("mscale_all_dim").value_or(0);
    double attentionFactor =
        mscale != 0 && mscaleAllDim != 0
            ? yarnMscale(*factor, mscale) / yarnMscale(*factor, mscaleAllDim)
            : yarnMscale(*factor, 1.0);
    if (std::optional<double> given = number("attention_factor")) {
      if (!(*given > 0)) {
        reader.fail(where("attention_factor"),
                    llvm::formatv("expected > 0, got {0}", *given));
        return;
      }
      attentionFactor = *given;
    }
    // The factors the kernels multiply by are f32: a huge mscale must not
    // reach them as inf (or 0), but be refused by the field that made it.
    auto isF32Factor = [](double v) {
      return v > 0 && std::isfinite(static_cast<float>(v)) &&
             static_cast<float>(v) > 0;
    };
    if (!isF32Factor(attentionFactor)) {
      reader.fail(where(mscale != 0 ? "mscale" : "factor"),
                  "gives YaRN's attention factor " + describe(attentionFactor) +
                      ", expected a positive finite f32");
      return;
    }
    scaling = RopeScalingAttr::get(context, RopeScalingKind::yarn, *factor,
                                   original, betaFast, betaSlow, truncate, 0.0,
                                   0.0, attentionFactor);
    if (scalesSoftmax && mscaleAllDim != 0) {
      double m = yarnMscale(*factor, mscaleAllDim);
      if (!isF32Factor(m * m)) {
        reader.fail(where("mscale_all_dim"),
                    "gives the softmax scale factor " + describe(m * m) +
                        ", expected a positive finite f32");
        return;
      }
      attrs.number("softmax_scale_factor", m * m);
    }
  }
  if (!reader.failed())
    attrs.attribute("rope_scaling", scaling);
}
