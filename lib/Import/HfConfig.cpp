//===- HfConfig.cpp - HF config.json to moe.transformer -------------------===//
//
// One table of fields per architecture: each field is mapped to an
// attribute of moe.transformer, required to hold the one value moec
// implements, or known not to change the training step. Whatever is left
// is refused by name. HF's defaults fill the fields a config leaves out;
// transformers 4's names (rope_theta, rope_scaling, num_experts) and 5's
// (rope_parameters, num_local_experts) are both read.
//
// Every problem is reported, one line each, naming the HF field and its
// value: sizes are checked against moec's limits (TransformerLimits.h)
// before anything is built from them, and the combinations the dialect's
// verifier checks are checked first here in HF's terms, so that the
// verifier is only a backstop.
//
//===----------------------------------------------------------------------===//
#include "moe/Import/HfConfig.h"
#include "ConfigReader.h"
#include "HfRope.h"
#include "ImportAttributes.h"

#include "moe/Import/HfQuantization.h"

#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/IR/TransformerLimits.h"
#include "moe/Import/ConfigJson.h"
#include "moe/Runtime/Program.h"

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
using namespace mlir::moe::import;
namespace json = llvm::json;

namespace {

/// The architectures moe-import reads, by HF class and model_type. Kimi-K2
/// is DeepSeek-V3's architecture under its own model_type.
struct Architecture {
  StringRef hfClass, modelType, family;
};
constexpr Architecture kArchitectures[] = {
    {"MixtralForCausalLM", "mixtral", "mixtral"},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3_moe"},
    {"DeepseekV3ForCausalLM", "deepseek_v3", "deepseek_v3"},
    {"DeepseekV3ForCausalLM", "kimi_k2", "deepseek_v3"},
};

/// Fields that do not change the training step: token ids, dtypes,
/// versions, generation and output switches, the labels of HF's heads.
/// A null in them is HF's "unset" (use_cache, typed bool by HF, is read
/// as one).
constexpr StringLiteral kMetadata[] = {"_name_or_path",
                                       "architectures",
                                       "model_type",
                                       "torch_dtype",
                                       "dtype",
                                       "transformers_version",
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
                                       "auto_map"};

/// Fields whose null HF reads as "none" or replaces by a value of its own.
/// transformers 5.25's config classes are strict dataclasses that refuse
/// None for a field typed int, float, bool or str; where a field takes None
/// (Qwen3-MoE's num_local_experts, DeepSeek-V3's rope_interleave) the model
/// then fails on it or reads it as false. A null anywhere else is refused.
constexpr StringLiteral kNullableEverywhere[] = {
    "rope_parameters", "rope_scaling", "quantization_config"};
constexpr StringLiteral kNullableMixtral[] = {"head_dim", "sliding_window"};
constexpr StringLiteral kNullableQwen3Moe[] = {
    "mlp_only_layers", "sliding_window", "max_window_layers"};
constexpr StringLiteral kNullableDeepseekV3[] = {
    "q_lora_rank", "num_key_value_heads", "head_dim", "qk_head_dim"};

/// A size read from the config, and the HF field it came from.
struct SizeField {
  StringRef field;
  std::optional<int64_t> value;
};

/// The sizes the combination checks need, in HF's terms.
struct Shape {
  SizeField vocab, hidden, layers, heads, kvHeads, topK, experts, ffn;
  /// Mixtral's and Qwen3-MoE's head_dim; absent: hidden_size / heads.
  SizeField headDim;
  /// DeepSeek-V3's shared experts and routing groups.
  SizeField sharedExperts, nGroup, topkGroup;
  /// Multi-head latent attention's head widths.
  bool latent = false;
  SizeField qkRope, qkNope, vHead;
  int64_t maxPositions = 0;
};

/// The largest int64: a size without a limit of moec's own.
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

/// torch_dtype (transformers 4) or dtype (5): the checkpoint's dtype, by
/// its torch name (HF fails on any other: getattr(torch, name)).
void readDtype(ConfigReader &reader, StringRef field) {
  static constexpr StringLiteral kTorchDtypes[] = {
      "float32", "float",  "float16",       "half",       "bfloat16",
      "float64", "double", "float8_e4m3fn", "float8_e5m2"};
  const json::Value *value = reader.get(field);
  if (!value)
    return;
  std::optional<StringRef> name = value->getAsString();
  if (!name || !llvm::is_contained(kTorchDtypes, *name))
    reader.fail(field, "expected a torch dtype name (" +
                           llvm::join(ArrayRef(kTorchDtypes), ", ") +
                           "), got " + describe(*value));
}

/// The fields every architecture shares. `fallbackPositions` is HF's
/// default max_position_embeddings for the class.
void readCommon(ConfigReader &reader, Attributes &attrs, Shape &shape,
                double fallbackRmsEps, int64_t fallbackPositions) {
  reader.allowNull(kMetadata);
  reader.allowNull(kNullableEverywhere);
  for (StringLiteral field : kMetadata)
    reader.get(field);
  reader.boolean("use_cache", true);
  for (StringRef field : {"torch_dtype", "dtype"})
    readDtype(reader, field);
  // HF's heads' labels: it iterates them as dicts.
  for (StringRef field : {"id2label", "label2id"})
    if (const json::Value *labels = reader.get(field);
        labels && !labels->getAsObject())
      reader.fail(field, "expected an object, got " + describe(*labels));
  shape.vocab = {"vocab_size", reader.size("vocab_size", {}, 1, kMaxVocab,
                                           "vocabulary entries")};
  shape.hidden = {"hidden_size", reader.size("hidden_size", {}, 1, kMaxHidden,
                                             "hidden units")};
  shape.layers = {"num_hidden_layers", reader.size("num_hidden_layers", {}, 1,
                                                   kMaxLayers, "layers")};
  shape.heads = {"num_attention_heads", reader.size("num_attention_heads", {},
                                                    1, kMaxHidden, "heads")};
  shape.kvHeads = {
      "num_key_value_heads",
      reader.has("num_key_value_heads")
          ? reader.size("num_key_value_heads", {}, 1, kMaxHidden, "heads")
          : shape.heads.value};
  shape.topK = {"num_experts_per_tok", reader.size("num_experts_per_tok", {}, 1,
                                                   kMaxExperts, "experts")};
  attrs.integer("vocab", shape.vocab.value);
  attrs.integer("hidden", shape.hidden.value);
  attrs.integer("layers", shape.layers.value);
  attrs.integer("heads", shape.heads.value);
  attrs.integer("kv_heads", shape.kvHeads.value);
  attrs.integer("top_k", shape.topK.value);
  attrs.number("rms_eps", reader.bounded("rms_norm_eps", fallbackRmsEps, 0.0,
                                         1.0, /*openLow=*/true,
                                         /*hfFloat=*/true));
  attrs.number("init_std",
               reader.bounded("initializer_range", 0.02, 0.0,
                              ::moe::rt::kMaxInitStd, /*openLow=*/true,
                              /*hfFloat=*/true));
  attrs.boolean("tie_word_embeddings",
                reader.boolean("tie_word_embeddings", false));
  reader.tokenId("bos_token_id", shape.vocab.value, /*list=*/false);
  reader.tokenId("eos_token_id", shape.vocab.value, /*list=*/true);
  reader.tokenId("pad_token_id", shape.vocab.value, /*list=*/false);
  shape.maxPositions = reader
                           .size("max_position_embeddings", fallbackPositions,
                                 1, kUnbounded, "positions")
                           .value_or(0);
  reader.expectString("hidden_act", "silu");
  reader.expectNumber("attention_dropout", 0.0);
  reader.expectBool("attention_bias", false);
  reader.expectNumber("pretraining_tp", 1);
  if (const json::Value *quantization = reader.get("quantization_config"))
    for (const QuantizationProblem &problem :
         checkQuantizationConfig(*quantization))
      reader.fail(problem.field, problem.why);
}

/// HF adds the load-balancing loss only when output_router_logits, which
/// the published Mixtral and Qwen3 configs turn off (HF's forward for
/// inference); a training run almost always wants it, so the import says
/// so, and --router-aux-loss takes router_aux_loss_coef regardless.
void readAuxLoss(ConfigReader &reader, Attributes &attrs, HfImport &result,
                 const HfImportOptions &options) {
  bool output = reader.boolean("output_router_logits", false);
  std::optional<double> coef =
      reader.bounded("router_aux_loss_coef", 0.001, 0.0, 1.0,
                     /*openLow=*/false, /*hfFloat=*/true);
  bool train = output || options.routerAuxLoss;
  attrs.number("aux_coef", train ? coef.value_or(0.0) : 0.0);
  std::string given = describe(coef.value_or(0.0));
  if (!train)
    result.notes.push_back(
        "output_router_logits is false: HF's forward adds no load-balancing "
        "loss, so none is trained (aux_coef = 0) and nothing keeps the "
        "experts' load even; moe-import --router-aux-loss takes "
        "router_aux_loss_coef (" +
        given + ") instead");
  else if (!output)
    result.notes.push_back("--router-aux-loss: aux_coef = router_aux_loss_coef "
                           "(" +
                           given + ") although output_router_logits is false");
  if (train && coef.value_or(0.0) > 0)
    result.notes.push_back(
        "aux_coef: HF pools every layer's router logits into one "
        "load-balancing loss, moec averages the layers' losses");
}

void readMixtral(ConfigReader &reader, Attributes &attrs, Shape &shape,
                 HfImport &result, const HfImportOptions &options) {
  reader.allowNull(kNullableMixtral);
  readCommon(reader, attrs, shape, 1e-5, 4096 * 32);
  readRope(reader, attrs, result, 1e6, /*scalesSoftmax=*/false);
  readAuxLoss(reader, attrs, result, options);
  shape.ffn = {"intermediate_size",
               reader.size("intermediate_size", {}, 1, kMaxFfn, "units")};
  shape.experts = {"num_local_experts", reader.size("num_local_experts", {}, 1,
                                                    kMaxExperts, "experts")};
  attrs.integer("ffn", shape.ffn.value);
  attrs.integer("experts", shape.experts.value);
  if (reader.has("head_dim")) {
    shape.headDim = {"head_dim",
                     reader.size("head_dim", {}, 1, kMaxHidden, "units")};
    attrs.integer("head_dim", shape.headDim.value);
  }
  reader.expectFloatToken("router_jitter_noise");
  reader.expectNumber("router_jitter_noise", 0.0);
  reader.expectAbsent("sliding_window",
                      "sliding-window attention is not implemented");
}

/// Qwen3-MoE's dense layers: those in mlp_only_layers, and with
/// decoder_sparse_step k all but every k-th (HF: a layer is sparse when
/// not listed and (layer + 1) % k == 0).
void readQwen3DenseLayers(ConfigReader &reader, Attributes &attrs,
                          const Shape &shape, Builder &b) {
  std::optional<int64_t> step =
      reader.size("decoder_sparse_step", 1, 1, kUnbounded, "");
  std::optional<int64_t> layers = shape.layers.value;
  llvm::SmallSet<int64_t, 8> mlpOnly;
  bool listed = true;
  if (const json::Value *list = reader.get("mlp_only_layers")) {
    const json::Array *array = list->getAsArray();
    if (!array) {
      reader.fail("mlp_only_layers",
                  "expected a list of layer indices, got " + describe(*list));
      listed = false;
    } else {
      for (auto [i, entry] : llvm::enumerate(*array)) {
        std::optional<int64_t> layer = integerToken(entry);
        if (!layer || *layer < 0 || (layers && *layer >= *layers)) {
          reader.fail("mlp_only_layers",
                      llvm::formatv("entry {0}: expected a layer index in [0, "
                                    "num_hidden_layers = {1}), got {2}",
                                    i, layers ? std::to_string(*layers) : "?",
                                    describe(entry)));
          listed = false;
          break;
        }
        mlpOnly.insert(*layer);
      }
    }
  }
  // num_hidden_layers is within moec's limit before this list is built.
  if (!layers || !step || !listed)
    return;
  SmallVector<int64_t> dense;
  for (int64_t layer = 0; layer < *layers; ++layer)
    if (mlpOnly.contains(layer) || (layer + 1) % *step != 0)
      dense.push_back(layer);
  if (!dense.empty())
    attrs.attribute("dense_layers", b.getDenseI64ArrayAttr(dense));
}

/// Qwen3-MoE's and DeepSeek-V3's FFN widths: the experts' and the dense
/// layers'.
void readFfnWidths(ConfigReader &reader, Attributes &attrs, Shape &shape) {
  shape.ffn = {"moe_intermediate_size",
               reader.size("moe_intermediate_size", {}, 1, kMaxFfn, "units")};
  attrs.integer("ffn", shape.ffn.value);
  attrs.integer("dense_ffn",
                reader.size("intermediate_size", {}, 1, kMaxFfn, "units"));
}

void readQwen3Moe(ConfigReader &reader, Attributes &attrs, Shape &shape,
                  HfImport &result, const HfImportOptions &options,
                  Builder &b) {
  reader.allowNull(kNullableQwen3Moe);
  readCommon(reader, attrs, shape, 1e-6, 32768);
  readRope(reader, attrs, result, 1e4, /*scalesSoftmax=*/false);
  readAuxLoss(reader, attrs, result, options);
  readFfnWidths(reader, attrs, shape);
  // transformers 5 renamed num_experts.
  StringRef expertsField =
      reader.has("num_local_experts") ? "num_local_experts" : "num_experts";
  shape.experts = {expertsField,
                   reader.size(expertsField, 128, 1, kMaxExperts, "experts")};
  if (expertsField == "num_local_experts" && reader.has("num_experts") &&
      reader.integer("num_experts") != shape.experts.value)
    reader.fail("num_experts", "differs from num_local_experts (the same "
                               "field under transformers 5's name)");
  attrs.integer("experts", shape.experts.value);
  shape.headDim = {"head_dim",
                   reader.size("head_dim", 128, 1, kMaxHidden, "units")};
  attrs.integer("head_dim", shape.headDim.value);
  attrs.boolean("qk_norm", true);
  attrs.boolean("norm_topk_prob", reader.boolean("norm_topk_prob", false));
  readQwen3DenseLayers(reader, attrs, shape, b);
  if (reader.boolean("use_sliding_window", false))
    reader.fail("use_sliding_window",
                "sliding-window attention is not implemented");
  // Only read with use_sliding_window; HF types it int (or None) anyway.
  if (reader.has("sliding_window"))
    reader.integer("sliding_window");
  reader.get("max_window_layers");
  attrs.string("family", "qwen3_moe");
}

/// Multi-head latent attention; q_lora_rank null means a plain q_proj.
void readLatentAttention(ConfigReader &reader, Attributes &attrs,
                         Shape &shape) {
  shape.latent = true;
  if (reader.has("q_lora_rank"))
    attrs.integer("q_lora_rank",
                  reader.size("q_lora_rank", {}, 1, kMaxHidden, "units"));
  attrs.integer("kv_lora_rank",
                reader.size("kv_lora_rank", 512, 1, kMaxHidden, "units"));
  shape.qkRope = {"qk_rope_head_dim",
                  reader.size("qk_rope_head_dim", 64, 1, kMaxHidden, "units")};
  shape.qkNope = {"qk_nope_head_dim",
                  reader.size("qk_nope_head_dim", 128, 1, kMaxHidden, "units")};
  shape.vHead = {"v_head_dim",
                 reader.size("v_head_dim", 128, 1, kMaxHidden, "units")};
  attrs.integer("qk_rope_head_dim", shape.qkRope.value);
  attrs.integer("qk_nope_head_dim", shape.qkNope.value);
  attrs.integer("v_head_dim", shape.vHead.value);
  attrs.boolean("rope_interleave", reader.boolean("rope_interleave", true));
  // Derived fields HF writes: they must agree.
  std::optional<int64_t> rope = shape.qkRope.value, nope = shape.qkNope.value;
  if (reader.has("qk_head_dim") && rope && nope) {
    std::optional<int64_t> given = reader.integer("qk_head_dim");
    if (given && *given != *rope + *nope)
      reader.fail("qk_head_dim",
                  llvm::formatv("expected qk_nope_head_dim + qk_rope_head_dim "
                                "= {0}, got {1}",
                                *rope + *nope, *given));
  }
  if (reader.has("head_dim") && rope) {
    std::optional<int64_t> given = reader.integer("head_dim");
    if (given && *given != *rope)
      reader.fail("head_dim",
                  llvm::formatv("expected qk_rope_head_dim (HF's RoPE width) "
                                "= {0}, got {1}",
                                *rope, *given));
  }
}

void readDeepseekV3(ConfigReader &reader, Attributes &attrs, Shape &shape,
                    HfImport &result, const HfImportOptions &options,
                    Builder &b) {
  reader.allowNull(kNullableDeepseekV3);
  readCommon(reader, attrs, shape, 1e-6, 4096);
  readRope(reader, attrs, result, 1e4, /*scalesSoftmax=*/true);
  readFfnWidths(reader, attrs, shape);
  shape.experts = {"n_routed_experts", reader.size("n_routed_experts", {}, 1,
                                                   kMaxExperts, "experts")};
  attrs.integer("experts", shape.experts.value);
  shape.sharedExperts = {"n_shared_experts", reader.size("n_shared_experts", 1,
                                                         0, kMaxFfn, "units")};
  attrs.integer("shared_experts", shape.sharedExperts.value);
  attrs.number("routed_scaling_factor",
               reader.bounded("routed_scaling_factor", 2.5, 0.0, 100.0,
                              /*openLow=*/true, /*hfFloat=*/true));
  shape.nGroup = {"n_group",
                  reader.size("n_group", 8, 1, kMaxExperts, "groups")};
  shape.topkGroup = {"topk_group",
                     reader.size("topk_group", 4, 1, kMaxExperts, "groups")};
  attrs.integer("n_group", shape.nGroup.value);
  attrs.integer("topk_group", shape.topkGroup.value);
  attrs.boolean("norm_topk_prob", reader.boolean("norm_topk_prob", true));
  // HF: layer i is dense while i < first_k_dense_replace. Built only once
  // num_hidden_layers is known to be within moec's limit.
  std::optional<int64_t> first =
      reader.size("first_k_dense_replace", 3, 0, kUnbounded, "");
  if (std::optional<int64_t> layers = shape.layers.value; first && layers) {
    if (*first >= *layers)
      result.notes.push_back(llvm::formatv(
          "first_k_dense_replace = {0} >= num_hidden_layers = {1}: every "
          "layer is dense, as in HF",
          *first, *layers));
    SmallVector<int64_t> dense;
    for (int64_t layer = 0; layer < std::min(*first, *layers); ++layer)
      dense.push_back(layer);
    if (!dense.empty())
      attrs.attribute("dense_layers", b.getDenseI64ArrayAttr(dense));
  }
  readLatentAttention(reader, attrs, shape);
  // The original (remote-code) config's router and balancing fields.
  reader.expectString("scoring_func", "sigmoid");
  reader.expectString("topk_method", "noaux_tc");
  reader.expectNumber("moe_layer_freq", 1);
  reader.get("ep_size");
  bool sequenceLoss = reader.boolean("seq_aux", false);
  double alpha =
      reader.bounded("aux_loss_alpha", 0.0, 0.0, 1.0, false).value_or(0.0);
  attrs.number("seq_aux_coef", sequenceLoss ? alpha : 0.0);
  if (!sequenceLoss && alpha > 0)
    reader.fail("aux_loss_alpha",
                "a batch-wise loss on sigmoid scores is not implemented "
                "(seq_aux: true is)");
  if (std::optional<int64_t> mtp =
          reader.size("num_nextn_predict_layers", 0, 0, kMaxLayers, "layers");
      mtp && *mtp > 0)
    result.notes.push_back(llvm::formatv(
        "num_nextn_predict_layers = {0}: multi-token prediction is not "
        "built (HF's DeepseekV3ForCausalLM does not build it either)",
        *mtp));
  // HF's class computes no router loss from it, but types it bool.
  reader.boolean("output_router_logits", false);
  if (options.routerAuxLoss)
    reader.failFlag("--router-aux-loss",
                    "DeepseekV3ForCausalLM has no router_aux_loss_coef: it "
                    "balances its experts by bias updates "
                    "(--bias-update-rate) and seq_aux's aux_loss_alpha");
  attrs.string("family", "deepseek_v3");
  attrs.attribute("scoring", RouterScoringAttr::get(b.getContext(),
                                                    RouterScoring::sigmoid));
  attrs.number("aux_coef", 0.0);
  attrs.number("bias_update_rate", options.biasUpdateRate);
  result.notes.push_back(
      "bias_update_rate = " + describe(options.biasUpdateRate) +
      ": HF's config has none (DeepSeek-V3's report trained with 0.001; "
      "moe-import --bias-update-rate sets it)");
}

/// The attention heads' widths: what the dialect's verifier checks, in
/// HF's terms.
void checkHeads(ConfigReader &reader, const Shape &s) {
  std::optional<int64_t> heads = s.heads.value, kv = s.kvHeads.value;
  if (s.latent) {
    if (s.qkRope.value && *s.qkRope.value % 2 != 0)
      reader.fail(s.qkRope.field,
                  llvm::formatv("expected an even width (RoPE rotates "
                                "pairs), got {0}",
                                *s.qkRope.value));
    if (heads && s.qkRope.value && s.qkNope.value && s.vHead.value) {
      int64_t widest =
          std::max(*s.qkRope.value + *s.qkNope.value, *s.vHead.value);
      if (widest > kMaxHidden / *heads)
        reader.fail(s.heads.field,
                    llvm::formatv("{0} heads of width {1} are more than "
                                  "moec's {2} units",
                                  *heads, widest, kMaxHidden));
    }
    if (heads && kv && *kv != *heads)
      reader.fail(s.kvHeads.field,
                  llvm::formatv("expected num_attention_heads = {0} (latent "
                                "attention has a key and value per head), "
                                "got {1}",
                                *heads, *kv));
    return;
  }
  std::optional<int64_t> width;
  if (s.headDim.value) {
    if (heads && *s.headDim.value > kMaxHidden / *heads)
      reader.fail(s.headDim.field,
                  llvm::formatv("{0} heads of width {1} are more than moec's "
                                "{2} units",
                                *heads, *s.headDim.value, kMaxHidden));
    else
      width = s.headDim.value;
  } else if (heads && s.hidden.value) {
    if (*s.hidden.value % *heads != 0)
      reader.fail(s.heads.field,
                  llvm::formatv("{0} does not divide hidden_size = {1}", *heads,
                                *s.hidden.value));
    else
      width = *s.hidden.value / *heads;
  }
  if (width && *width % 2 != 0)
    reader.fail(s.headDim.value ? s.headDim.field : s.heads.field,
                llvm::formatv("gives heads of width {0}; RoPE needs an even "
                              "width",
                              *width));
  if (heads && kv && *heads % *kv != 0)
    reader.fail(s.kvHeads.field,
                llvm::formatv("{0} does not divide num_attention_heads = {1}",
                              *kv, *heads));
}

/// The routing rule's sizes (moe.router): experts per token, groups.
void checkRouting(ConfigReader &reader, const Shape &s) {
  std::optional<int64_t> experts = s.experts.value, topK = s.topK.value;
  if (topK && experts && *topK > *experts)
    reader.fail(s.topK.field, llvm::formatv("{0} is more than the {1} "
                                            "experts ({2})",
                                            *topK, *experts, s.experts.field));
  if (s.sharedExperts.value && s.ffn.value &&
      *s.sharedExperts.value > kMaxFfn / *s.ffn.value)
    reader.fail(s.sharedExperts.field,
                llvm::formatv("{0} shared experts of {1} = {2} units are "
                              "more than moec's {3}",
                              *s.sharedExperts.value, s.ffn.field, *s.ffn.value,
                              kMaxFfn));
  std::optional<int64_t> groups = s.nGroup.value, top = s.topkGroup.value;
  if (!groups || !experts)
    return;
  if (*experts % *groups != 0) {
    reader.fail(s.nGroup.field,
                llvm::formatv("{0} does not divide the {1} experts ({2})",
                              *groups, *experts, s.experts.field));
    return;
  }
  int64_t perGroup = *experts / *groups;
  if (*groups > 1 && perGroup < 2) {
    reader.fail(s.nGroup.field,
                llvm::formatv("{0} groups of {1} expert: a group is scored "
                              "by its two best experts",
                              *groups, perGroup));
    return;
  }
  if (top && *top > *groups)
    reader.fail(s.topkGroup.field,
                llvm::formatv("{0} is more than n_group = {1}", *top, *groups));
  else if (top && topK && *top * perGroup < *topK)
    reader.fail(s.topkGroup.field,
                llvm::formatv("{0} groups of {1} experts hold fewer than "
                              "num_experts_per_tok = {2}",
                              *top, perGroup, *topK));
}

/// RoPE's base, wherever the config gave it: finite, positive and at most
/// kMaxRopeTheta (published models use 1e4 to 1e7).
constexpr double kMaxRopeTheta = 1e9;
void checkRopeTheta(ConfigReader &reader, const json::Object &config,
                    const Attributes &attrs) {
  auto theta = dyn_cast_if_present<FloatAttr>(attrs.lookup("rope_theta"));
  if (!theta)
    return;
  double value = theta.getValueAsDouble();
  if (std::isfinite(value) && value > 0 && value <= kMaxRopeTheta)
    return;
  const json::Object *parameters =
      config.get("rope_parameters")
          ? config.get("rope_parameters")->getAsObject()
          : nullptr;
  reader.fail(parameters && parameters->get("rope_theta")
                  ? "rope_parameters.rope_theta"
                  : "rope_theta",
              llvm::formatv("expected a number in (0, {0}], got {1}",
                            describe(kMaxRopeTheta), describe(value)));
}

/// The step's shape: --seq within the positions the model was made for,
/// and the tokens per step within moec's limits.
void readStep(ConfigReader &reader, Attributes &attrs, const Shape &shape,
              const HfImportOptions &options) {
  int64_t positions = shape.maxPositions;
  int64_t seq = options.seq.value_or(
      positions > 0 ? std::min<int64_t>(4096, positions) : 4096);
  int64_t batch = options.batch.value_or(8);
  if (positions > 0 && seq > positions)
    reader.fail("max_position_embeddings",
                llvm::formatv("--seq {0} is longer than the model's {1} "
                              "positions",
                              seq, positions));
  if (seq > kMaxSeq)
    reader.failFlag("--seq", llvm::formatv("{0} is more than moec's {1} "
                                           "tokens per sequence",
                                           seq, kMaxSeq));
  if (batch > kMaxBatch)
    reader.failFlag("--batch", llvm::formatv("{0} is more than moec's {1} "
                                             "sequences per step",
                                             batch, kMaxBatch));
  if (seq <= kMaxSeq && batch <= kMaxBatch) {
    int64_t tokens = seq * batch;
    if (tokens > kMaxTokens)
      reader.failFlag("--batch", llvm::formatv("--batch {0} x --seq {1} = {2} "
                                               "tokens per step are more "
                                               "than moec's {3}",
                                               batch, seq, tokens, kMaxTokens));
    else if (shape.topK.value && tokens * *shape.topK.value > kMaxAssignments)
      reader.failFlag("--batch",
                      llvm::formatv("--batch {0} x --seq {1} x "
                                    "num_experts_per_tok {2} routed tokens "
                                    "per step are more than moec's {3}",
                                    batch, seq, *shape.topK.value,
                                    kMaxAssignments));
  }
  attrs.integer("seq", seq);
  attrs.integer("batch", batch);
}

/// The architecture the config names by its HF class and model_type; null
/// with `error` set when it names none moe-import reads.
const Architecture *findArchitecture(const json::Object &config,
                                     const std::string &origin,
                                     std::string &error) {
  SmallVector<StringRef> classes, types;
  for (const Architecture &a : kArchitectures) {
    if (!llvm::is_contained(classes, a.hfClass))
      classes.push_back(a.hfClass);
    types.push_back(a.modelType);
  }
  std::string classList = llvm::join(classes, ", ");
  const Architecture *arch = nullptr;
  if (const json::Value *list = config.get("architectures");
      list && list->getAsArray()) {
    const json::Array &array = *list->getAsArray();
    if (array.size() != 1 || !array[0].getAsString()) {
      error = origin +
              ": field 'architectures': expected one class name, "
              "got " +
              describe(*list);
      return nullptr;
    }
    StringRef name = *array[0].getAsString();
    for (const Architecture &a : kArchitectures)
      if (!arch && a.hfClass == name)
        arch = &a;
    if (!arch) {
      error = origin + ": field 'architectures': '" + cutForMessage(name) +
              "' is not implemented; known: " + classList;
      return nullptr;
    }
  }
  if (const json::Value *type = config.get("model_type")) {
    std::optional<StringRef> name = type->getAsString();
    const Architecture *byType = nullptr;
    for (const Architecture &a : kArchitectures)
      if (name && a.modelType == *name)
        byType = &a;
    if (!byType || (arch && arch->hfClass != byType->hfClass)) {
      std::string given =
          name ? "'" + cutForMessage(*name) + "'" : describe(*type);
      error = origin + ": field 'model_type': " + given + " is not " +
              (arch ? "the architecture's ('" + arch->modelType.str() + "')"
                    : "one moe-import implements (" + llvm::join(types, ", ") +
                          ")");
      return nullptr;
    }
    arch = byType;
  }
  if (!arch)
    error = origin +
            ": field 'architectures': missing, and no 'model_type' names "
            "the model; known: " +
            classList;
  return arch;
}

} // namespace

FailureOr<HfImport> mlir::moe::importHfConfig(const json::Object &config,
                                              const std::string &origin,
                                              const HfImportOptions &options,
                                              ModuleOp module,
                                              std::string &error) {
  const Architecture *arch = findArchitecture(config, origin, error);
  if (!arch)
    return failure();
  HfImport result;
  result.architecture = arch->hfClass.str();
  ConfigReader reader(config, origin, options.ignored, arch->hfClass);

  Builder b(module.getContext());
  Attributes attrs(b);
  Shape shape;
  if (arch->family == "mixtral")
    readMixtral(reader, attrs, shape, result, options);
  else if (arch->family == "qwen3_moe")
    readQwen3Moe(reader, attrs, shape, result, options, b);
  else
    readDeepseekV3(reader, attrs, shape, result, options, b);
  if (const json::Value *quantization = reader.get("quantization_config"))
    result.notes.push_back(describeQuantizationConfig(*quantization));
  checkHeads(reader, shape);
  checkRouting(reader, shape);
  checkRopeTheta(reader, config, attrs);
  readStep(reader, attrs, shape, options);
  reader.refuseUnknown();
  if (reader.failed()) {
    error = llvm::join(reader.problems, "\n");
    return failure();
  }

  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  OperationState state(NameLoc::get(b.getStringAttr(origin)),
                       TransformerOp::getOperationName());
  attrs.attribute("sym_name", b.getStringAttr(arch->family));
  state.addAttributes(attrs.list);
  Operation *op = builder.create(state);
  // Every size is within its maximum (checked above), so the total is too.
  if (int64_t total = transformerParameters(cast<TransformerOp>(op));
      total > kMaxParameters) {
    error = llvm::formatv("{0}: field '{1}': {2} layers of {3} experts "
                          "({4}) of width {5} ({6}) at hidden_size {7} make "
                          "{8} parameters, more than moec's {9} (2^48)",
                          origin, shape.layers.field, *shape.layers.value,
                          *shape.experts.value, shape.experts.field,
                          *shape.ffn.value, shape.ffn.field,
                          *shape.hidden.value, total, kMaxParameters);
    op->erase();
    return failure();
  }
  // The checks above name the config's fields; the dialect's verifier
  // stays the last word, in moec's terms.
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
