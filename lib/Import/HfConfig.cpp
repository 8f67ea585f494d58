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

#include "moe/Import/HfQuantization.h"

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
  SmallVector<NamedAttribute> list;

private:
  Builder &b;
};

/// RoPE: transformers 5's rope_parameters or 4's rope_theta and
/// rope_scaling; only unscaled RoPE is implemented.
void readRope(ConfigReader &reader, Attributes &attrs, double fallbackTheta) {
  if (const json::Value *parameters = reader.get("rope_parameters")) {
    const json::Object *object = parameters->getAsObject();
    if (!object) {
      reader.fail("rope_parameters", "expected an object");
      return;
    }
    for (const auto &[key, value] : *object) {
      StringRef name = key;
      if (name == "rope_theta") {
        if (std::optional<double> theta = value.getAsNumber())
          attrs.number("rope_theta", *theta);
        else
          reader.fail("rope_parameters.rope_theta", "expected a number");
      } else if (name == "rope_type") {
        if (value.getAsString() != std::optional<StringRef>("default"))
          reader.fail("rope_parameters.rope_type",
                      "moec implements 'default' (unscaled RoPE) only");
      } else {
        reader.fail(("rope_parameters." + name).str(),
                    "not implemented (known: rope_theta, rope_type)");
      }
    }
    if (!object->get("rope_theta"))
      attrs.number("rope_theta", fallbackTheta);
  } else {
    attrs.number("rope_theta", reader.number("rope_theta", fallbackTheta));
  }
  reader.expectAbsent("rope_scaling",
                      "scaled RoPE (YaRN, linear, dynamic) is not implemented");
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
  if (const json::Value *quantization = reader.get("quantization_config"))
    for (const QuantizationProblem &problem :
         checkQuantizationConfig(*quantization))
      reader.fail(problem.field, problem.why);
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
  readRope(reader, attrs, 1e6);
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
  readRope(reader, attrs, 1e4);
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
  readRope(reader, attrs, 1e4);
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
  if (const json::Value *quantization = reader.get("quantization_config"))
    result.notes.push_back(describeQuantizationConfig(*quantization));

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
