//===- ExpandTransformer.cpp - moe.transformer to the op-level graph ------===//
//
// Builds the HF Mixtral decoder (docs/semantics.md, "Decoder layer") from the
// config-level op. Parameter names are HF's, so checkpoints map one to one.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

namespace mlir::moe {
#define GEN_PASS_DEF_EXPANDTRANSFORMER
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Emits parameters at module level and ops into the forward function.
class ModelBuilder {
public:
  ModelBuilder(TransformerOp config, func::FuncOp forward)
      : config(config), moduleBuilder(config), body(config.getContext()) {
    body.setInsertionPointToStart(&forward.getBody().front());
  }

  /// Declares a parameter and reads it in the forward function.
  Value param(const Twine &name, ArrayRef<int64_t> shape, InitKind init,
              Location loc) {
    auto type = RankedTensorType::get(shape, Float32Type::get(config.getContext()));
    std::string symbol = name.str();
    // Norm weights (initialised to one) are not decayed, as in Megatron's
    // and HF's training recipes.
    moduleBuilder.create<ParamOp>(
        config.getLoc(), symbol, type, init,
        init == InitKind::normal ? config.getInitStdAttr() : FloatAttr(),
        ParamKind::weight, /*no_weight_decay=*/init == InitKind::ones,
        /*sharding=*/ShardingAttr(), /*sharding_origin=*/ArrayAttr(),
        /*master=*/FlatSymbolRefAttr());
    return body.create<GetParamOp>(loc, type, symbol);
  }

  /// Declares a router's selection bias: [experts], zeros, which nothing
  /// differentiates and no weight decay touches.
  FlatSymbolRefAttr routerBias(const Twine &name) {
    auto type =
        RankedTensorType::get({static_cast<int64_t>(config.getExperts())},
                              Float32Type::get(config.getContext()));
    auto param = moduleBuilder.create<ParamOp>(
        config.getLoc(), name.str(), type, InitKind::zeros, FloatAttr(),
        ParamKind::router_bias, /*no_weight_decay=*/true,
        /*sharding=*/ShardingAttr(),
        /*sharding_origin=*/ArrayAttr(), /*master=*/FlatSymbolRefAttr());
    return FlatSymbolRefAttr::get(param.getSymNameAttr());
  }

  Value linear(Value x, Value w, Location loc) {
    auto xType = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(xType.getShape());
    shape.back() = cast<RankedTensorType>(w.getType()).getDimSize(0);
    return body.create<LinearOp>(loc, xType.clone(shape), x, w, Value());
  }

  /// RMSNorm over x's last dimension.
  Value rmsNorm(Value x, const Twine &weightName, Location loc) {
    Value w = param(weightName,
                    {cast<RankedTensorType>(x.getType()).getShape().back()},
                    InitKind::ones, loc);
    return body.create<RMSNormOp>(loc, x.getType(), x, w,
                                  config.getRmsEpsAttr(),
                                  /*num_heads=*/IntegerAttr());
  }

  Value add(Value a, Value b, Location loc) {
    return body.create<AddOp>(loc, a, b);
  }

  /// input W^T with a new weight `name`.weight of [out, in].
  Value projection(const Twine &name, int64_t out, int64_t in, Value input,
                   Location loc) {
    Value w = param(name + ".weight", {out, in}, InitKind::normal, loc);
    return linear(input, w, loc);
  }

  /// x's type with a last dimension of `width`.
  static RankedTensorType withWidth(Value x, int64_t width) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape.back() = width;
    return type.clone(shape);
  }

  /// The attention ops' scale_factor: the model's softmax_scale_factor,
  /// left out when it is 1 (the plain 1/sqrt(d)).
  FloatAttr softmaxScaleFactor() {
    FloatAttr factor = config.getSoftmaxScaleFactorAttr();
    return factor.getValueAsDouble() == 1.0 ? FloatAttr() : factor;
  }

  /// DeepSeek's multi-head latent attention block (docs/semantics.md):
  /// returns x + o_proj(attention(...)).
  Value latentAttentionBlock(Value x, const std::string &prefix) {
    Location loc = named(prefix + "self_attn");
    int64_t hidden = config.getHidden(), heads = config.getHeads();
    int64_t kvRank = *config.getKvLoraRank();
    int64_t rope = *config.getQkRopeHeadDim();
    int64_t nope = *config.getQkNopeHeadDim();
    int64_t valueDim = *config.getVHeadDim();
    Value n = rmsNorm(x, prefix + "input_layernorm.weight",
                      named(prefix + "input_layernorm"));
    auto proj = [&](StringRef name, int64_t out, int64_t in, Value input) {
      return projection(prefix + "self_attn." + name, out, in, input, loc);
    };
    auto norm = [&](Value input, StringRef name) {
      return rmsNorm(input, prefix + "self_attn." + name + ".weight", loc);
    };
    auto i64 = [&](int64_t value) { return body.getI64IntegerAttr(value); };
    auto split = [&](Value input, int64_t numHeads, int64_t lhs, int64_t rhs) {
      return body.create<SplitHeadsOp>(loc, withWidth(input, numHeads * lhs),
                                       withWidth(input, numHeads * rhs), input,
                                       i64(numHeads));
    };
    // Queries: each head's features without position, then RoPE's.
    Value q;
    if (std::optional<uint64_t> qRank = config.getQLoraRank()) {
      Value compressed = proj("q_a_proj", *qRank, hidden, n);
      q = proj("q_b_proj", heads * (nope + rope), *qRank,
               norm(compressed, "q_a_layernorm"));
    } else {
      q = proj("q_proj", heads * (nope + rope), hidden, n);
    }
    auto queryParts = split(q, heads, nope, rope);
    // Keys and values from one compressed vector, and one RoPE key that
    // every head shares.
    Value kvA = proj("kv_a_proj_with_mqa", kvRank + rope, hidden, n);
    auto kvParts = split(kvA, 1, kvRank, rope);
    Value kv = proj("kv_b_proj", heads * (nope + valueDim), kvRank,
                    norm(kvParts.getLhs(), "kv_a_layernorm"));
    auto keyParts = split(kv, heads, nope, valueDim);
    Value qRope = body.create<RoPEOp>(
        loc, queryParts.getRhs().getType(), queryParts.getRhs(), positions,
        i64(heads), config.getRopeThetaAttr(), ArrayAttr(),
        config.getRopeScalingAttr());
    Value kRope = body.create<RoPEOp>(
        loc, kvParts.getRhs().getType(), kvParts.getRhs(), positions, i64(1),
        config.getRopeThetaAttr(), ArrayAttr(), config.getRopeScalingAttr());
    Value query = body.create<ConcatHeadsOp>(
        loc, q.getType(), queryParts.getLhs(), qRope, i64(heads));
    Value key = body.create<ConcatHeadsOp>(loc, q.getType(), keyParts.getLhs(),
                                           kRope, i64(heads));
    auto qType = cast<RankedTensorType>(q.getType());
    auto lseType =
        qType.clone({qType.getDimSize(0), heads, qType.getDimSize(1)});
    auto attention = body.create<AttentionOp>(
        loc, withWidth(q, heads * valueDim), lseType, query, key,
        keyParts.getRhs(), positions, i64(heads), i64(heads), ArrayAttr(),
        UnitAttr(), softmaxScaleFactor());
    Value o = proj("o_proj", hidden, heads * valueDim, attention.getOutput());
    return add(x, o, loc);
  }

  /// Pre-norm attention block: returns x + o_proj(attention(...)).
  Value attentionBlock(Value x, int64_t layer) {
    std::string prefix = "model.layers." + std::to_string(layer) + ".";
    if (config.getKvLoraRank())
      return latentAttentionBlock(x, prefix);
    Location loc = named(prefix + "self_attn");
    int64_t hidden = config.getHidden(), heads = config.getHeads();
    int64_t kvHeads = config.getKvHeads();
    int64_t headDim = config.getHeadDim().value_or(hidden / heads);
    Value n = rmsNorm(x, prefix + "input_layernorm.weight",
                      named(prefix + "input_layernorm"));
    auto proj = [&](StringRef name, int64_t out, int64_t in, Value input) {
      return projection(prefix + "self_attn." + name, out, in, input, loc);
    };
    Value q = proj("q_proj", heads * headDim, hidden, n);
    Value k = proj("k_proj", kvHeads * headDim, hidden, n);
    Value v = proj("v_proj", kvHeads * headDim, hidden, n);
    auto i64 = [&](int64_t value) { return body.getI64IntegerAttr(value); };
    // Qwen3's QK-norm: each head's query and key normalised before RoPE.
    if (config.getQkNorm()) {
      auto headNorm = [&](Value x, StringRef name, int64_t numHeads) {
        Value w = param(prefix + "self_attn." + name + ".weight", {headDim},
                        InitKind::ones, loc);
        return body.create<RMSNormOp>(loc, x.getType(), x, w,
                                      config.getRmsEpsAttr(), i64(numHeads));
      };
      q = headNorm(q, "q_norm", heads);
      k = headNorm(k, "k_norm", kvHeads);
    }
    q = body.create<RoPEOp>(loc, q.getType(), q, positions, i64(heads),
                            config.getRopeThetaAttr(), ArrayAttr(),
                            config.getRopeScalingAttr());
    k = body.create<RoPEOp>(loc, k.getType(), k, positions, i64(kvHeads),
                            config.getRopeThetaAttr(), ArrayAttr(),
                            config.getRopeScalingAttr());
    auto qType = cast<RankedTensorType>(q.getType());
    auto lseType = qType.clone(
        {qType.getDimSize(0), heads, qType.getDimSize(1)});
    auto attention = body.create<AttentionOp>(
        loc, qType, lseType, q, k, v, positions, i64(heads), i64(kvHeads),
        ArrayAttr(), UnitAttr(), softmaxScaleFactor());
    Value o = proj("o_proj", hidden, heads * headDim, attention.getOutput());
    return add(x, o, loc);
  }

  /// A feed-forward block's output and, for an MoE layer, the router
  /// losses its coefficients ask for (null where not).
  struct FfnBlock {
    Value output, aux, sequenceAux, zLoss;
  };

  /// Pre-norm feed-forward block.
  FfnBlock ffnBlock(Value x, int64_t layer, bool dense) {
    std::string prefix = "model.layers." + std::to_string(layer) + ".";
    Value n = rmsNorm(x, prefix + "post_attention_layernorm.weight",
                      named(prefix + "post_attention_layernorm"));
    int64_t hidden = config.getHidden();
    if (dense) {
      Location loc = named(prefix + "mlp");
      int64_t ffn = config.getDenseFfn().value_or(config.getFfn());
      return {add(x, swigluMlp(n, prefix + "mlp.", ffn, loc), loc)};
    }
    const HfNames &names = *hfNamesOf(config.getFamily());
    Location loc = named(prefix + names.moeBlock);
    int64_t experts = config.getExperts(), ffn = config.getFfn();
    int64_t topK = config.getTopK();
    std::string moe = prefix + names.moeBlock.str() + ".";
    Value gate = param(moe + "gate.weight", {experts, hidden},
                       InitKind::normal, loc);
    Value logits = linear(n, gate, loc);
    auto logitsType = cast<RankedTensorType>(logits.getType());
    SmallVector<int64_t> routedShape(logitsType.getShape());
    routedShape.back() = topK;
    // DeepSeek-V3's auxiliary-loss-free balancing: a selection bias the
    // step's end moves by the whole batch's per-expert load.
    float biasRate = config.getBiasUpdateRate().convertToFloat();
    FlatSymbolRefAttr biasSymbol;
    Value bias;
    if (biasRate > 0.0f) {
      biasSymbol = routerBias(moe + "gate.e_score_correction_bias");
      bias = body.create<GetParamOp>(
          loc, RankedTensorType::get({experts}, body.getF32Type()), biasSymbol);
    }
    auto router = body.create<RouterOp>(
        loc, logitsType, logitsType.clone(routedShape),
        RankedTensorType::get(routedShape, body.getI32Type()), logits, bias,
        body.getI64IntegerAttr(topK), config.getCapacityFactorAttr(),
        config.getScoringAttr(), config.getNormTopkProbAttr(),
        config.getRoutedScalingFactorAttr(), config.getNGroupAttr(),
        config.getTopkGroupAttr());
    if (bias)
      addExpertLoad(moduleBuilder, router, moe + "gate.tokens_per_expert",
                    biasSymbol, config.getBiasUpdateRateAttr());
    auto expert = [&](StringRef name) {
      return moe + "experts.{e}." + name.str() + ".weight";
    };
    Value w1 = param(expert(names.expertGate), {experts, ffn, hidden},
                     InitKind::normal, loc);
    Value w3 = param(expert(names.expertUp), {experts, ffn, hidden},
                     InitKind::normal, loc);
    Value w2 = param(expert(names.expertDown), {experts, hidden, ffn},
                     InitKind::normal, loc);
    Value y = body.create<ExpertsOp>(loc, n.getType(), /*hidden=*/Type(), n,
                                     router.getWeights(), router.getIndices(),
                                     w1, w3, w2,
                                     /*expert_axes=*/ArrayAttr(),
                                     /*fp8=*/Fp8ScalingAttr(),
                                     /*fp8_block=*/IntegerAttr(),
                                     /*fp8_dispatch=*/UnitAttr(),
                                     /*fp8_history=*/FlatSymbolRefAttr())
                  .getResult();
    // The load-balancing loss recounts the top-k of the scores, which is
    // only the selection of a softmax router over one group without a bias
    // (the verifier holds aux_coef at 0 for the others).
    auto scalar = RankedTensorType::get({}, body.getF32Type());
    FfnBlock block;
    if (config.getScoring() == RouterScoring::softmax &&
        config.getNGroup() == 1 && !bias)
      block.aux = body.create<AuxLossOp>(loc, scalar, router.getProbs(),
                                         body.getI64IntegerAttr(topK),
                                         /*token_axes=*/ArrayAttr());
    // The sequence-wise loss counts the router's own selection.
    if (config.getSeqAuxCoef().convertToFloat() > 0.0f)
      block.sequenceAux = body.create<SequenceAuxLossOp>(
          loc, scalar, router.getProbs(), router.getIndices(),
          /*batch_axes=*/ArrayAttr(), /*sequence_axes=*/ArrayAttr());
    if (config.getZLossCoef().convertToFloat() > 0.0f)
      block.zLoss = body.create<ZLossOp>(loc, scalar, logits,
                                         /*token_axes=*/ArrayAttr());
    // DeepSeek's shared experts: one always-active MLP of their merged width.
    if (int64_t shared = config.getSharedExperts(); shared > 0) {
      Location sharedLoc = named(moe + "shared_experts");
      Value out =
          swigluMlp(n, moe + "shared_experts.", shared * ffn, sharedLoc);
      y = add(y, out, sharedLoc);
    }
    block.output = add(x, y, loc);
    return block;
  }

  /// down(silu(gate x) * up x), Llama's names under `prefix`.
  Value swigluMlp(Value x, const std::string &prefix, int64_t width,
                  Location loc) {
    int64_t hidden = config.getHidden();
    auto w = [&](StringRef name, int64_t out, int64_t in) {
      return param(prefix + name.str() + ".weight", {out, in}, InitKind::normal,
                   loc);
    };
    Value gate = linear(x, w("gate_proj", width, hidden), loc);
    Value up = linear(x, w("up_proj", width, hidden), loc);
    Value act = body.create<SwiGLUOp>(loc, gate, up);
    return linear(act, w("down_proj", hidden, width), loc);
  }

  /// The whole model: returns the training loss. With document masking,
  /// `documentPositions` ([B, S] i32) is each token's position in its
  /// document, which RoPE and attention read.
  Value build(Value tokens, Value targets, Value documentPositions = Value()) {
    positions = documentPositions;
    int64_t vocab = config.getVocab(), hidden = config.getHidden();
    Location embedLoc = named("model.embed_tokens");
    Value table = param("model.embed_tokens.weight", {vocab, hidden},
                        InitKind::normal, embedLoc);
    auto tokensType = cast<RankedTensorType>(tokens.getType());
    auto hiddenType = RankedTensorType::get(
        {tokensType.getDimSize(0), tokensType.getDimSize(1), hidden},
        body.getF32Type());
    Value h = body.create<EmbeddingOp>(embedLoc, hiddenType, tokens, table);

    llvm::SmallSet<int64_t, 8> dense;
    for (int64_t layer : config.getDenseLayers())
      dense.insert(layer);
    SmallVector<Value> auxLosses, sequenceAuxLosses, zLosses;
    for (int64_t layer = 0, e = config.getLayers(); layer < e; ++layer) {
      h = attentionBlock(h, layer);
      FfnBlock block = ffnBlock(h, layer, dense.contains(layer));
      h = block.output;
      if (block.aux)
        auxLosses.push_back(block.aux);
      if (block.sequenceAux)
        sequenceAuxLosses.push_back(block.sequenceAux);
      if (block.zLoss)
        zLosses.push_back(block.zLoss);
    }
    h = rmsNorm(h, "model.norm.weight", named("model.norm"));
    Location headLoc = named("lm_head");
    // Tied embeddings (HF tie_word_embeddings): the head reads the table,
    // and autodiff sums both uses' gradients into it.
    Value lmHead = config.getTieWordEmbeddings()
                       ? body.create<GetParamOp>(headLoc, table.getType(),
                                                 "model.embed_tokens.weight")
                       : param("lm_head.weight", {vocab, hidden},
                               InitKind::normal, headLoc);
    Value logits = linear(h, lmHead, headLoc);
    auto scalar = RankedTensorType::get({}, body.getF32Type());
    Location lossLoc = named("loss");
    Value ce = body.create<CrossEntropyOp>(lossLoc, scalar, logits, targets,
                                           /*token_axes=*/ArrayAttr());

    // loss = ce + aux_coef * mean_l aux_l + seq_aux_coef * sum_l seq_aux_l
    //        + z_loss_coef * sum_l z_l, the terms in this order (the
    // runtime's loss probe reads them by their producers).
    SmallVector<Value> terms = {ce};
    SmallVector<float> coefficients = {1.0f};
    float auxCoef = config.getAuxCoef().convertToFloat();
    for (Value aux : auxLosses) {
      terms.push_back(aux);
      coefficients.push_back(auxCoef / static_cast<float>(auxLosses.size()));
    }
    for (Value sequenceAux : sequenceAuxLosses) {
      terms.push_back(sequenceAux);
      coefficients.push_back(config.getSeqAuxCoef().convertToFloat());
    }
    for (Value zLoss : zLosses) {
      terms.push_back(zLoss);
      coefficients.push_back(config.getZLossCoef().convertToFloat());
    }
    return body.create<WeightedSumOp>(lossLoc, scalar, terms,
                                      body.getDenseF32ArrayAttr(coefficients));
  }

  OpBuilder &bodyBuilder() { return body; }

private:
  /// A location naming the model component, inside the transformer's.
  Location named(const Twine &name) {
    return NameLoc::get(StringAttr::get(config.getContext(), name),
                        config.getLoc());
  }

  TransformerOp config;
  /// Document masking's positions, or null.
  Value positions;
  OpBuilder moduleBuilder;
  OpBuilder body;
};
} // namespace

/// The model sizes kept on the module for reports and the artifact.
static DictionaryAttr modelAttr(TransformerOp config) {
  Builder b(config.getContext());
  SmallVector<NamedAttribute> entries = {
      b.getNamedAttr("name", config.getSymNameAttr()),
      b.getNamedAttr("vocab", config.getVocabAttr()),
      b.getNamedAttr("hidden", config.getHiddenAttr()),
      b.getNamedAttr("layers", config.getLayersAttr()),
      b.getNamedAttr("heads", config.getHeadsAttr()),
      b.getNamedAttr("kv_heads", config.getKvHeadsAttr()),
      b.getNamedAttr("head_dim",
                     b.getI64IntegerAttr(config.getHeadDim().value_or(
                         config.getHidden() / config.getHeads()))),
      b.getNamedAttr("experts", config.getExpertsAttr()),
      b.getNamedAttr("top_k", config.getTopKAttr()),
      b.getNamedAttr("ffn", config.getFfnAttr()),
      b.getNamedAttr(
          "dense_ffn",
          b.getI64IntegerAttr(config.getDenseFfn().value_or(config.getFfn()))),
      b.getNamedAttr("shared_experts", config.getSharedExpertsAttr()),
      // Multi-head latent attention's widths; 0 where absent.
      b.getNamedAttr("q_lora_rank",
                     b.getI64IntegerAttr(config.getQLoraRank().value_or(0))),
      b.getNamedAttr("kv_lora_rank",
                     b.getI64IntegerAttr(config.getKvLoraRank().value_or(0))),
      b.getNamedAttr(
          "qk_rope_head_dim",
          b.getI64IntegerAttr(config.getQkRopeHeadDim().value_or(0))),
      b.getNamedAttr(
          "qk_nope_head_dim",
          b.getI64IntegerAttr(config.getQkNopeHeadDim().value_or(0))),
      b.getNamedAttr("v_head_dim",
                     b.getI64IntegerAttr(config.getVHeadDim().value_or(0))),
      b.getNamedAttr("rope_interleave", config.getRopeInterleaveAttr()),
      b.getNamedAttr("seq", config.getSeqAttr()),
      b.getNamedAttr("batch", config.getBatchAttr()),
      b.getNamedAttr("dense_layers", config.getDenseLayersAttr()),
      b.getNamedAttr("rms_eps", config.getRmsEpsAttr()),
      b.getNamedAttr("rope_theta", config.getRopeThetaAttr()),
      b.getNamedAttr("aux_coef", config.getAuxCoefAttr()),
      b.getNamedAttr("capacity_factor", config.getCapacityFactorAttr()),
      b.getNamedAttr("scoring", b.getStringAttr(stringifyRouterScoring(
                                    config.getScoring()))),
      b.getNamedAttr("norm_topk_prob", config.getNormTopkProbAttr()),
      b.getNamedAttr("routed_scaling_factor",
                     config.getRoutedScalingFactorAttr()),
      b.getNamedAttr("n_group", config.getNGroupAttr()),
      b.getNamedAttr("topk_group", config.getTopkGroupAttr()),
      b.getNamedAttr("bias_update_rate", config.getBiasUpdateRateAttr()),
      b.getNamedAttr("seq_aux_coef", config.getSeqAuxCoefAttr()),
      b.getNamedAttr("z_loss_coef", config.getZLossCoefAttr()),
      b.getNamedAttr("qk_norm", config.getQkNormAttr()),
      b.getNamedAttr("family", config.getFamilyAttr()),
      b.getNamedAttr("tie_word_embeddings", config.getTieWordEmbeddingsAttr()),
      b.getNamedAttr("document_mask", config.getDocumentMaskAttr()),
      // The id ending a document in a flat token stream; -1 where absent.
      b.getNamedAttr("eos_token_id",
                     b.getI64IntegerAttr(
                         config.getEosTokenId()
                             ? static_cast<int64_t>(*config.getEosTokenId())
                             : -1)),
      b.getNamedAttr("init_std", config.getInitStdAttr())};
  return b.getDictionaryAttr(entries);
}

FailureOr<func::FuncOp> mlir::moe::expandTransformer(TransformerOp config) {
  auto module = config->getParentOfType<ModuleOp>();
  if (!module)
    return config.emitOpError() << "expected to be inside a module";
  if (module.lookupSymbol("forward"))
    return config.emitOpError()
           << "cannot expand: the module already has a symbol named 'forward'";

  // The function goes after the config op, the parameters before it, so
  // the module reads declarations first.
  OpBuilder builder(config->getBlock(), std::next(config->getIterator()));
  int64_t batch = config.getBatch(), seq = config.getSeq();
  auto ids = RankedTensorType::get({batch, seq},
                                   builder.getI32Type());
  auto scalar = RankedTensorType::get({}, builder.getF32Type());
  // Tokens and targets, and with document masking each token's position
  // in its document.
  SmallVector<Type> inputs(config.getDocumentMask() ? 3 : 2, ids);
  auto forward = builder.create<func::FuncOp>(
      config.getLoc(), "forward", builder.getFunctionType(inputs, scalar));
  Block *entry = forward.addEntryBlock();

  ModelBuilder model(config, forward);
  Value loss =
      model.build(entry->getArgument(0), entry->getArgument(1),
                  config.getDocumentMask() ? entry->getArgument(2) : Value());
  model.bodyBuilder().create<func::ReturnOp>(config.getLoc(), loss);

  module->setAttr(kModelAttrName, modelAttr(config));
  // The requested precision outlives the config op; moe-mixed-precision
  // weighs it against --precision and the target.
  if (std::optional<Precision> precision = config.getPrecision())
    module->setAttr(kPrecisionAttrName,
                    builder.getDictionaryAttr({builder.getNamedAttr(
                        "compute", builder.getStringAttr(
                                       stringifyPrecision(*precision)))}));
  config.erase();
  return forward;
}

namespace {
struct ExpandTransformerPass
    : public mlir::moe::impl::ExpandTransformerBase<ExpandTransformerPass> {
  void runOnOperation() override {
    SmallVector<TransformerOp> configs(getOperation().getOps<TransformerOp>());
    if (configs.size() > 1) {
      configs[1].emitOpError() << "expected one moe.transformer per module";
      return signalPassFailure();
    }
    for (TransformerOp config : configs)
      if (failed(expandTransformer(config)))
        return signalPassFailure();
  }
};
} // namespace
