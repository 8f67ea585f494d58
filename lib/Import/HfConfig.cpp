//===- HfConfig.cpp - HF config.json to moe.transformer -------------------===//
//
// One table of fields per architecture: each field is mapped to an
// attribute of moe.transformer, required to hold the one value moec
// implements, or known not to change the training step. Whatever is left
// is refused by name. HF's defaults fill the fields a config leaves out;
// transformers 4's names (rope_theta, rope_scaling, num_experts) and 5's
// (rope_parameters, num_local_experts) are both read.
//
//===----------------------------------------------------------------------===//
#include "moe/Import/HfConfig.h"

#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {

/// The architectures moe-import reads, by HF class and model_type.
struct Architecture {
  StringRef hfClass, modelType, family;
};
constexpr Architecture kArchitectures[] = {
    {"MixtralForCausalLM", "mixtral", "mixtral"},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3_moe"},
    {"DeepseekV3ForCausalLM", "deepseek_v3", "deepseek_v3"},
};

/// Fields that do not change the training step: token ids, dtypes,
/// versions, generation and output switches, the labels of HF's heads.
constexpr StringLiteral kMetadata[] = {"_name_or_path",
                                       "architectures",
                                       "model_type",
                                       "torch_dtype",
                                       "dtype",
                                       "transformers_version",
                                       "use_cache",
                                       "bos_token_id",
                                       "eos_token_id",
                                       "pad_token_id",
                                       "return_dict",
                                       "output_attentions",
                                       "output_hidden_states",
                                       "id2label",
                                       "label2id",
                                       "problem_type",
                                       "chunk_size_feed_forward",
                                       "is_encoder_decoder",
                                       "max_position_embeddings",
                                       "auto_map"};

/// Reads the fields of one config, remembering which it read; the first
/// problem is kept in `error`.
class ConfigReader {
public:
  ConfigReader(const json::Object &config, const std::string &origin,
               const std::set<std::string> &ignored)
      : config(config), origin(origin), ignored(ignored) {}

  bool failed() const { return !error.empty(); }
  std::string error;

  /// The value of `field`, or null when absent (or --ignore'd).
  const json::Value *get(StringRef field) {
    known.insert(field);
    if (ignored.count(field.str()))
      return nullptr;
    const json::Value *value = config.get(field);
    return value && value->kind() != json::Value::Null ? value : nullptr;
  }
  bool has(StringRef field) { return get(field) != nullptr; }

  void fail(StringRef field, const Twine &why) {
    if (error.empty())
      error = (origin + ": field '" + field + "': " + why).str();
  }

  /// An integer field; `fallback` when absent (HF's default), else an
  /// error for a missing one.
  std::optional<int64_t> integer(StringRef field,
                                 std::optional<int64_t> fallback = {}) {
    const json::Value *value = get(field);
    if (!value) {
      if (!fallback)
        fail(field, "missing");
      return fallback;
    }
    std::optional<int64_t> number = value->getAsInteger();
    if (!number)
      fail(field, "expected an integer");
    return number;
  }
  std::optional<double> number(StringRef field, double fallback) {
    const json::Value *value = get(field);
    if (!value)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number)
      fail(field, "expected a number");
    return number;
  }
  bool boolean(StringRef field, bool fallback) {
    const json::Value *value = get(field);
    if (!value)
      return fallback;
    std::optional<bool> flag = value->getAsBoolean();
    if (!flag)
      fail(field, "expected true or false");
    return flag.value_or(fallback);
  }
  /// A field that must be absent (null) or hold what moec implements.
  void expectString(StringRef field, StringRef implemented) {
    const json::Value *value = get(field);
    if (!value)
      return;
    std::optional<StringRef> text = value->getAsString();
    if (!text || *text != implemented)
      fail(field, llvm::formatv("moec implements '{0}' only", implemented));
  }
  void expectNumber(StringRef field, double implemented) {
    const json::Value *value = get(field);
    if (!value)
      return;
    std::optional<double> got = value->getAsNumber();
    if (!got || *got != implemented) {
      std::string number;
      llvm::raw_string_ostream(number) << llvm::format("%g", implemented);
      fail(field, "moec implements " + number + " only");
    }
  }
  void expectBool(StringRef field, bool implemented) {
    const json::Value *value = get(field);
    if (!value)
      return;
    std::optional<bool> got = value->getAsBoolean();
    if (!got || *got != implemented)
      fail(field, llvm::formatv("moec implements {0} only",
                                implemented ? "true" : "false"));
  }
  void expectAbsent(StringRef field, StringRef why) {
    if (has(field))
      fail(field, why);
  }

  /// Refuses the first field nobody read, listing the known ones.
  void refuseUnknown() {
    if (failed())
      return;
    for (const auto &[key, value] : config) {
      StringRef name = key;
      if (known.contains(name) || ignored.count(name.str()))
        continue;
      SmallVector<StringRef> names;
      for (const auto &entry : known)
        names.push_back(entry.getKey());
      llvm::sort(names);
      fail(name, "not implemented by moe-import; known fields: " +
                     llvm::join(names, ", ") + " (--ignore " + name +
                     " drops it, the model without it)");
      return;
    }
  }

private:
  const json::Object &config;
  const std::string &origin;
  const std::set<std::string> &ignored;
  llvm::StringSet<> known;
};

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
  MLIRContext *context() const { return b.getContext(); }
  SmallVector<NamedAttribute> list;

private:
  Builder &b;
};

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
  static constexpr StringLiteral kYarn[] = {
      "factor",    "original_max_position_embeddings",
      "beta_fast", "beta_slow",
      "mscale",    "mscale_all_dim",
      "truncate",  "attention_factor",
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

/// RoPE: transformers 5's rope_parameters, or 4's rope_theta and
/// rope_scaling (whose `type` transformers 5 reads as `rope_type`), as HF's
/// rotary embedding computes it: default, linear, yarn and llama3 become
/// #moe.rope_scaling (YaRN's attention factor resolved as HF resolves it);
/// dynamic NTK is unscaled RoPE for a step no longer than
/// max_position_embeddings, which the import requires. With
/// `scalesSoftmax` (DeepSeek's attention, HF's yarn_apply_mscale),
/// mscale_all_dim also multiplies the softmax scale.
void readRope(ConfigReader &reader, Attributes &attrs, HfImport &result,
              double fallbackTheta, bool scalesSoftmax) {
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
    scaling = RopeScalingAttr::get(context, RopeScalingKind::linear, *factor,
                                   0, 0.0, 0.0, true, 0.0, 0.0, 1.0);
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
    scaling = RopeScalingAttr::get(context, RopeScalingKind::yarn, *factor,
                                   original, betaFast, betaSlow, truncate, 0.0,
                                   0.0, attentionFactor);
    if (scalesSoftmax && mscaleAllDim != 0) {
      double m = yarnMscale(*factor, mscaleAllDim);
      attrs.number("softmax_scale_factor", m * m);
    }
  }
  if (!reader.failed())
    attrs.attribute("rope_scaling", scaling);
}

/// The fields every architecture shares.
void readCommon(ConfigReader &reader, Attributes &attrs,
                double fallbackRmsEps) {
  for (StringLiteral field : kMetadata)
    reader.get(field);
  attrs.integer("vocab", reader.integer("vocab_size"));
  attrs.integer("hidden", reader.integer("hidden_size"));
  attrs.integer("layers", reader.integer("num_hidden_layers"));
  std::optional<int64_t> heads = reader.integer("num_attention_heads");
  attrs.integer("heads", heads);
  attrs.integer("kv_heads", reader.integer("num_key_value_heads", heads));
  attrs.integer("top_k", reader.integer("num_experts_per_tok"));
  attrs.number("rms_eps", reader.number("rms_norm_eps", fallbackRmsEps));
  attrs.number("init_std", reader.number("initializer_range", 0.02));
  attrs.boolean("tie_word_embeddings",
                reader.boolean("tie_word_embeddings", false));
  reader.expectString("hidden_act", "silu");
  reader.expectNumber("attention_dropout", 0.0);
  reader.expectBool("attention_bias", false);
  reader.expectNumber("pretraining_tp", 1);
  reader.expectAbsent("quantization_config",
                      "quantized checkpoints are not implemented (moe-run "
                      "--load reads F32, BF16 and F16 weights)");
}

/// HF adds the load-balancing loss only when output_router_logits.
void readAuxLoss(ConfigReader &reader, Attributes &attrs, HfImport &result) {
  bool output = reader.boolean("output_router_logits", false);
  double coef = reader.number("router_aux_loss_coef", 0.001).value_or(0.0);
  attrs.number("aux_coef", output ? coef : 0.0);
  if (output && coef > 0)
    result.notes.push_back(
        "aux_coef: HF pools every layer's router logits into one "
        "load-balancing loss, moec averages the layers' losses");
}

void readMixtral(ConfigReader &reader, Attributes &attrs, HfImport &result) {
  readCommon(reader, attrs, 1e-5);
  readRope(reader, attrs, result, 1e6, /*scalesSoftmax=*/false);
  readAuxLoss(reader, attrs, result);
  attrs.integer("ffn", reader.integer("intermediate_size"));
  attrs.integer("experts", reader.integer("num_local_experts"));
  if (reader.has("head_dim"))
    attrs.integer("head_dim", reader.integer("head_dim"));
  reader.expectNumber("router_jitter_noise", 0.0);
  reader.expectAbsent("sliding_window",
                      "sliding-window attention is not implemented");
}

void readQwen3Moe(ConfigReader &reader, Attributes &attrs, HfImport &result,
                  Builder &b) {
  readCommon(reader, attrs, 1e-6);
  readRope(reader, attrs, result, 1e4, /*scalesSoftmax=*/false);
  readAuxLoss(reader, attrs, result);
  std::optional<int64_t> layers = reader.integer("num_hidden_layers");
  attrs.integer("ffn", reader.integer("moe_intermediate_size"));
  attrs.integer("dense_ffn", reader.integer("intermediate_size"));
  // transformers 5 renamed num_experts.
  std::optional<int64_t> experts = reader.has("num_local_experts")
                                       ? reader.integer("num_local_experts")
                                       : reader.integer("num_experts", 128);
  reader.get("num_experts");
  attrs.integer("experts", experts);
  attrs.integer("head_dim", reader.integer("head_dim", 128));
  attrs.boolean("qk_norm", true);
  attrs.boolean("norm_topk_prob", reader.boolean("norm_topk_prob", false));
  // Dense layers: those in mlp_only_layers, and with decoder_sparse_step
  // k all but every k-th.
  std::optional<int64_t> step = reader.integer("decoder_sparse_step", 1);
  SmallVector<int64_t> dense;
  llvm::SmallSet<int64_t, 8> mlpOnly;
  if (const json::Value *list = reader.get("mlp_only_layers")) {
    const json::Array *array = list->getAsArray();
    if (!array)
      reader.fail("mlp_only_layers", "expected a list of layer indices");
    else
      for (const json::Value &entry : *array)
        if (std::optional<int64_t> layer = entry.getAsInteger())
          mlpOnly.insert(*layer);
        else
          reader.fail("mlp_only_layers", "expected a list of layer indices");
  }
  if (step && *step < 1)
    reader.fail("decoder_sparse_step", "expected >= 1");
  if (layers && step && *step >= 1)
    for (int64_t layer = 0; layer < *layers; ++layer)
      if (mlpOnly.contains(layer) || (layer + 1) % *step != 0)
        dense.push_back(layer);
  if (!dense.empty())
    attrs.attribute("dense_layers", b.getDenseI64ArrayAttr(dense));
  if (reader.boolean("use_sliding_window", false))
    reader.fail("use_sliding_window",
                "sliding-window attention is not implemented");
  // Only read with use_sliding_window.
  reader.get("sliding_window");
  reader.get("max_window_layers");
  attrs.string("family", "qwen3_moe");
}

void readDeepseekV3(ConfigReader &reader, Attributes &attrs, HfImport &result,
                    const HfImportOptions &options, Builder &b) {
  readCommon(reader, attrs, 1e-6);
  readRope(reader, attrs, result, 1e4, /*scalesSoftmax=*/true);
  attrs.integer("ffn", reader.integer("moe_intermediate_size"));
  attrs.integer("dense_ffn", reader.integer("intermediate_size"));
  attrs.integer("experts", reader.integer("n_routed_experts"));
  attrs.integer("shared_experts", reader.integer("n_shared_experts", 1));
  attrs.number("routed_scaling_factor",
               reader.number("routed_scaling_factor", 2.5));
  attrs.integer("n_group", reader.integer("n_group", 8));
  attrs.integer("topk_group", reader.integer("topk_group", 4));
  attrs.boolean("norm_topk_prob", reader.boolean("norm_topk_prob", true));
  if (std::optional<int64_t> first = reader.integer("first_k_dense_replace", 3);
      first && *first > 0) {
    SmallVector<int64_t> dense;
    for (int64_t layer = 0; layer < *first; ++layer)
      dense.push_back(layer);
    attrs.attribute("dense_layers", b.getDenseI64ArrayAttr(dense));
  }
  // Multi-head latent attention; q_lora_rank null means a plain q_proj.
  if (reader.has("q_lora_rank"))
    attrs.integer("q_lora_rank", reader.integer("q_lora_rank"));
  attrs.integer("kv_lora_rank", reader.integer("kv_lora_rank", 512));
  std::optional<int64_t> rope = reader.integer("qk_rope_head_dim", 64);
  std::optional<int64_t> nope = reader.integer("qk_nope_head_dim", 128);
  attrs.integer("qk_rope_head_dim", rope);
  attrs.integer("qk_nope_head_dim", nope);
  attrs.integer("v_head_dim", reader.integer("v_head_dim", 128));
  attrs.boolean("rope_interleave", reader.boolean("rope_interleave", true));
  // Derived fields HF writes: they must agree.
  if (rope && nope && reader.has("qk_head_dim") &&
      reader.integer("qk_head_dim") != *rope + *nope)
    reader.fail("qk_head_dim", "expected qk_nope_head_dim + qk_rope_head_dim");
  if (rope && reader.has("head_dim") && reader.integer("head_dim") != *rope)
    reader.fail("head_dim", "expected qk_rope_head_dim (HF's RoPE width)");
  // The original (remote-code) config's router and balancing fields.
  reader.expectString("scoring_func", "sigmoid");
  reader.expectString("topk_method", "noaux_tc");
  reader.expectNumber("moe_layer_freq", 1);
  reader.get("ep_size");
  bool sequenceLoss = reader.boolean("seq_aux", false);
  double alpha = reader.number("aux_loss_alpha", 0.0).value_or(0.0);
  attrs.number("seq_aux_coef", sequenceLoss ? alpha : 0.0);
  if (!sequenceLoss && alpha > 0)
    reader.fail("aux_loss_alpha",
                "a batch-wise loss on sigmoid scores is not implemented "
                "(seq_aux: true is)");
  if (std::optional<int64_t> mtp =
          reader.integer("num_nextn_predict_layers", 0);
      mtp && *mtp > 0)
    result.notes.push_back(llvm::formatv(
        "num_nextn_predict_layers = {0}: multi-token prediction is not "
        "built (HF's DeepseekV3ForCausalLM does not build it either)",
        *mtp));
  reader.get("output_router_logits");
  attrs.string("family", "deepseek_v3");
  attrs.attribute("scoring", RouterScoringAttr::get(b.getContext(),
                                                    RouterScoring::sigmoid));
  attrs.number("aux_coef", 0.0);
  attrs.number("bias_update_rate", options.biasUpdateRate);
  std::string rate;
  llvm::raw_string_ostream(rate) << llvm::format("%g", options.biasUpdateRate);
  result.notes.push_back(
      "bias_update_rate = " + rate +
      ": HF's config has none (DeepSeek-V3's report trained with 0.001; "
      "moe-import --bias-update-rate sets it)");
}

} // namespace

FailureOr<HfImport> mlir::moe::importHfConfig(const json::Object &config,
                                              const std::string &origin,
                                              const HfImportOptions &options,
                                              ModuleOp module,
                                              std::string &error) {
  ConfigReader reader(config, origin, options.ignored);
  HfImport result;
  // The architecture: HF's class name, else the model_type.
  const Architecture *arch = nullptr;
  std::string names;
  for (const Architecture &a : kArchitectures)
    names += (names.empty() ? "" : ", ") + a.hfClass.str();
  if (const json::Value *list = config.get("architectures");
      list && list->getAsArray()) {
    const json::Array &array = *list->getAsArray();
    if (array.size() != 1 || !array[0].getAsString()) {
      error = origin + ": field 'architectures': expected one class name";
      return failure();
    }
    StringRef name = *array[0].getAsString();
    for (const Architecture &a : kArchitectures)
      if (a.hfClass == name)
        arch = &a;
    if (!arch) {
      error = (origin + ": field 'architectures': '" + name +
               "' is not implemented; known: " + names)
                  .str();
      return failure();
    }
  }
  if (const json::Value *type = config.get("model_type")) {
    std::optional<StringRef> name = type->getAsString();
    const Architecture *byType = nullptr;
    for (const Architecture &a : kArchitectures)
      if (name && a.modelType == *name)
        byType = &a;
    if (!byType || (arch && arch != byType)) {
      error = (origin + ": field 'model_type': '" + name.value_or("?") +
               "' is not " +
               (arch ? "the architecture's ('" + arch->modelType + "')"
                     : "one moe-import implements (mixtral, qwen3_moe, "
                       "deepseek_v3)"))
                  .str();
      return failure();
    }
    arch = byType;
  }
  if (!arch) {
    error = origin +
            ": neither 'architectures' nor 'model_type' names the "
            "model; known: " +
            names;
    return failure();
  }
  result.architecture = arch->hfClass.str();

  Builder b(module.getContext());
  Attributes attrs(b);
  if (arch->modelType == "mixtral")
    readMixtral(reader, attrs, result);
  else if (arch->modelType == "qwen3_moe")
    readQwen3Moe(reader, attrs, result, b);
  else
    readDeepseekV3(reader, attrs, result, options, b);

  // The step's shape: --seq within the positions the model was made for.
  int64_t maxPositions = 0;
  if (const json::Value *value = config.get("max_position_embeddings"))
    maxPositions = value->getAsInteger().value_or(0);
  int64_t seq = options.seq.value_or(
      maxPositions > 0 ? std::min<int64_t>(4096, maxPositions) : 4096);
  if (maxPositions > 0 && seq > maxPositions)
    reader.fail("max_position_embeddings",
                llvm::formatv("--seq {0} is longer than the model's {1} "
                              "positions",
                              seq, maxPositions));
  attrs.integer("seq", seq);
  attrs.integer("batch", options.batch.value_or(8));
  reader.refuseUnknown();
  if (reader.failed()) {
    error = reader.error;
    return failure();
  }

  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  OperationState state(NameLoc::get(b.getStringAttr(origin)),
                       TransformerOp::getOperationName());
  std::string symbol = arch->modelType.str();
  attrs.attribute("sym_name", b.getStringAttr(symbol));
  state.addAttributes(attrs.list);
  Operation *op = builder.create(state);
  // The dialect's verifier has the last word on sizes and combinations.
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
      diagnostics += (diagnostics.empty() ? "" : "; ") + d.str();
      return success();
    });
    if (failed(verify(op))) {
      error = origin + ": the model is not one moec implements: " + diagnostics;
      op->erase();
      return failure();
    }
  }
  return result;
}
