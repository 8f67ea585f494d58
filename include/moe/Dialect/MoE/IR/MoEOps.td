//===- MoEOps.td - ops of the moe dialect ------------------*- tablegen -*-===//
//
// The math of every op is in docs/semantics.md; the descriptions here say
// what the op is for, its shapes and its invariants.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_DIALECT_MOE_IR_MOEOPS_TD
#define MOE_DIALECT_MOE_IR_MOEOPS_TD

include "moe/Dialect/MoE/IR/MoEBase.td"
include "moe/Dialect/MoE/IR/MoEAttrs.td"
include "moe/Dialect/MoE/IR/MoEInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Module-level configuration and parameters
//===----------------------------------------------------------------------===//

def MoE_TransformerOp : MoE_Op<"transformer", [Symbol]> {
  let summary = "config-level decoder-only MoE transformer";
  let description = [{
    The compact form of a model (one per module): `moe-expand-transformer`
    replaces it with
    the parameters (`moe.param`, HF Mixtral names) and a `func.func
    @forward(%tokens, %targets) -> tensor<f32>` computing the training loss
    for one batch of `batch` sequences of `seq` tokens.

    Layers listed in `dense_layers` use a dense SwiGLU MLP of width
    `dense_ffn` (default: `ffn`); the others are MoE layers with `experts`
    SwiGLU experts of width `ffn`, `top_k` of which each token uses. With
    `shared_experts = n > 0` (DeepSeek's `n_shared_experts`) each MoE layer
    also has one always-active SwiGLU MLP of width `n * ffn`, as DeepSeek
    merges its shared experts, whose output is added to the routed experts'
    (`block_sparse_moe.shared_experts.{gate,up,down}_proj`).

    `family` picks the HF parameter names, so checkpoints map one to one:
    `mixtral` (the default; `block_sparse_moe.gate`,
    `block_sparse_moe.experts.{e}.w1/w3/w2`), `qwen3_moe` and `deepseek_v3`
    (`mlp.gate`, `mlp.experts.{e}.gate_proj/up_proj/down_proj`,
    `mlp.shared_experts.*`). The math does not depend on it.

    With `tie_word_embeddings` (HF's name), the LM head reads the embedding
    table (`model.embed_tokens.weight`, whose gradient sums both uses)
    instead of an `lm_head.weight` of its own.

    With `kv_lora_rank` (DeepSeek-V2/V3's multi-head latent attention),
    keys and values come from one compressed vector per token: the
    `kv_a_proj_with_mqa` projection gives `kv_lora_rank` features
    (normalised by `kv_a_layernorm`) and one RoPE key of
    `qk_rope_head_dim` that every head shares; `kv_b_proj` expands the
    features to each head's key (`qk_nope_head_dim`) and value
    (`v_head_dim`). Queries are `q_proj` of the input, or with
    `q_lora_rank` `q_b_proj(q_a_layernorm(q_a_proj x))`, each head's
    `qk_nope_head_dim` features then `qk_rope_head_dim` rotated ones; the
    scale is `1/sqrt(qk_nope_head_dim + qk_rope_head_dim)` and `o_proj`
    maps the heads' values back (`moe.split_heads`, `moe.concat_heads`).
    `rope_interleave` (HF DeepSeek-V3's, its default) names the checkpoint
    layout only: there each head's RoPE features are stored as interleaved
    pairs, a fixed permutation of the rows of `q_b_proj` (or `q_proj`) and
    `kv_a_proj_with_mqa` that `moe-run --load` and `--save` apply; the math
    does not depend on it.

    With `document_mask` (packed-sequence training), a sequence holds
    several documents and none sees another: attention stays within each
    document and RoPE positions restart at each document's first token.
    The step then reads a third input, each token's position in its
    document, which `moe-run` derives from the data: a Megatron dataset's
    document offsets, or in a flat token stream `eos_token_id`, which ends
    a document. A token whose target begins the next document has no
    target, as HF's packed-sequence training ignores that label.

    With `rope_scaling` (`#moe.rope_scaling`: linear, YaRN or llama3), every
    RoPE of the model stretches its frequencies as that attribute says, and
    YaRN multiplies cos and sin by its attention factor.
    `softmax_scale_factor` multiplies every attention's softmax scale
    `1/sqrt(d)`: DeepSeek-V2/V3's YaRN correction `mscale(factor,
    mscale_all_dim)^2`, which HF's DeepseekV3Attention folds into its
    `scaling` for the non-rotary features too.

    With `qk_norm` (Qwen3), each attention head's query and key are
    RMS-normalised before RoPE, with one weight of `head_dim` each
    (`self_attn.q_norm.weight`, `self_attn.k_norm.weight`, eps `rms_eps`).

    The router (`moe.router`) scores the experts by `scoring` (softmax, the
    default, or DeepSeek-V3's sigmoid), picks each token's `top_k` among
    the experts of its `topk_group` best of `n_group` groups, and weighs
    them by their scores, renormalised when `norm_topk_prob` (the default,
    as Mixtral; Qwen3-MoE configs may turn it off), times
    `routed_scaling_factor`. The load-balancing loss (`aux_coef`) counts
    the top-k of the scores, so it needs softmax scoring and one group.
    With `bias_update_rate = r > 0`, DeepSeek-V3's auxiliary-loss-free
    balancing: each MoE layer's router adds a per-expert bias
    (`block_sparse_moe.gate.e_score_correction_bias`, not trained) to the
    scores it selects by, and each step ends by moving it by
    `r * sign(mean load - load)` over the whole batch's tokens
    (`moe.expert_load`, `moe.expert_load_update`).

    The training loss is the cross-entropy plus `aux_coef` times the mean
    over the MoE layers of their load-balancing losses (`moe.aux_loss`, as
    HF averages them), plus `seq_aux_coef` times the sum over the MoE
    layers of DeepSeek-V3's sequence-wise balance losses
    (`moe.sequence_aux_loss`, which counts the router's own selection, so
    any scoring, groups or bias) and `z_loss_coef` times the sum of their
    router z-losses (`moe.z_loss`). The last two are summed over layers as
    DeepSeek and Megatron-Core apply them, each layer with the coefficient.

    Constraints:
    * all sizes are positive; `heads` is divisible by `kv_heads`; the head
      dimension is `head_dim` when given (Qwen3's, independent of `hidden`;
      then `heads * head_dim` is at most the `hidden` bound), else
      `hidden / heads`, with `hidden` divisible by `heads`; it is even
      (RoPE);
    * sizes are at most: `vocab` 2^20 (1048576), `hidden`, `heads` and
      `kv_heads` 2^16 (65536), `layers` 2^12 (4096), `experts` 2^14
      (16384), `ffn` and `dense_ffn` 2^18 (262144), `seq` and `batch` 2^20;
      `batch * seq` (tokens per step) at most 2^28, `batch * seq * top_k`
      (routed tokens) at most 2^32, and the model at most 2^48 parameters.
      Real models stay far below (a 1T-parameter model has 2^40; the
      largest published vocabularies 2^18, widths 2^15, MoE layers a few
      hundred experts), and within these every tensor has at most 2^48 elements,
      so that parameter, element and byte counts stay inside int64
      (FLOPs are counted in double);
    * multi-head latent attention has all of `kv_lora_rank`,
      `qk_rope_head_dim` (even), `qk_nope_head_dim` and `v_head_dim`, with
      `q_lora_rank` optional, each in `(0, 2^16]`, `kv_heads = heads`, no
      `head_dim` and no `qk_norm`; without `kv_lora_rank`, none of them
      and no `rope_interleave`;
    * `1 <= top_k <= experts`; `shared_experts >= 0`, and
      `shared_experts * ffn` at most the `ffn` bound;
    * every entry of `dense_layers` is in `[0, layers)` and unique;
    * `rms_eps > 0`, `rope_theta > 0`, `aux_coef >= 0`,
      `softmax_scale_factor > 0`;
    * `eos_token_id`, when given, is in `[0, vocab)`;
    * `0 < init_std <= 1`, the bound the runtime's artifact verifier checks
      on every normal-initialised parameter (a larger std makes activations
      grow by the width at every layer);
    * `0 <= capacity_factor <= experts` (0: no token dropping; from
      `experts / top_k` on nothing is dropped, so a larger factor only
      inflates the capacity count);
    * `routed_scaling_factor > 0`; `n_group` divides `experts`, with at
      least two experts per group when `n_group > 1`; `1 <= topk_group <=
      n_group`, and `topk_group` groups hold at least `top_k` experts;
    * `aux_coef = 0` unless the scoring is softmax with one group and
      without a bias; `bias_update_rate >= 0`, `seq_aux_coef >= 0`,
      `z_loss_coef >= 0`;
    * `family` is one of `mixtral`, `qwen3_moe`, `deepseek_v3`.

    `precision` (`#moe.precision<fp32>` or `<bf16>`) is the precision the
    model trains in; moec's `--precision` overrides it, and without either
    moec uses fp32 for the CPU target and bf16 for GPU targets.

    Example:

    ```mlir
    moe.transformer @tiny {vocab = 256, hidden = 64, layers = 2, heads = 4,
                           kv_heads = 2, experts = 4, top_k = 2, ffn = 128,
                           seq = 64, batch = 8, dense_layers = array<i64: 0>}
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    I64Attr:$vocab,
    I64Attr:$hidden,
    I64Attr:$layers,
    I64Attr:$heads,
    I64Attr:$kv_heads,
    I64Attr:$experts,
    I64Attr:$top_k,
    I64Attr:$ffn,
    I64Attr:$seq,
    I64Attr:$batch,
    DefaultValuedAttr<DenseI64ArrayAttr, "{}">:$dense_layers,
    OptionalAttr<I64Attr>:$dense_ffn,
    DefaultValuedAttr<I64Attr, "0">:$shared_experts,
    OptionalAttr<I64Attr>:$head_dim,
    OptionalAttr<I64Attr>:$q_lora_rank,
    OptionalAttr<I64Attr>:$kv_lora_rank,
    OptionalAttr<I64Attr>:$qk_rope_head_dim,
    OptionalAttr<I64Attr>:$qk_nope_head_dim,
    OptionalAttr<I64Attr>:$v_head_dim,
    DefaultValuedAttr<BoolAttr, "false">:$rope_interleave,
    DefaultValuedAttr<F32Attr, "1.0e-5">:$rms_eps,
    DefaultValuedAttr<F32Attr, "10000.0">:$rope_theta,
    OptionalAttr<MoE_RopeScalingAttr>:$rope_scaling,
    DefaultValuedAttr<F32Attr, "1.0">:$softmax_scale_factor,
    DefaultValuedAttr<F32Attr, "0.01">:$aux_coef,
    DefaultValuedAttr<F32Attr, "0.0">:$capacity_factor,
    DefaultValuedAttr<F32Attr, "0.02">:$init_std,
    DefaultValuedAttr<MoE_RouterScoringAttr,
        "::mlir::moe::RouterScoring::softmax">:$scoring,
    DefaultValuedAttr<BoolAttr, "true">:$norm_topk_prob,
    DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling_factor,
    DefaultValuedAttr<I64Attr, "1">:$n_group,
    DefaultValuedAttr<I64Attr, "1">:$topk_group,
    DefaultValuedAttr<F32Attr, "0.0">:$bias_update_rate,
    DefaultValuedAttr<F32Attr, "0.0">:$seq_aux_coef,
    DefaultValuedAttr<F32Attr, "0.0">:$z_loss_coef,
    DefaultValuedAttr<BoolAttr, "false">:$qk_norm,
    DefaultValuedAttr<StrAttr, "\"mixtral\"">:$family,
    DefaultValuedAttr<BoolAttr, "false">:$tie_word_embeddings,
    DefaultValuedAttr<BoolAttr, "false">:$document_mask,
    OptionalAttr<I64Attr>:$eos_token_id,
    OptionalAttr<MoE_PrecisionAttr>:$precision
  );
  let assemblyFormat = "$sym_name attr-dict";
  let hasVerifier = 1;
}

def MoE_AdamWConfigOp : MoE_Op<"adamw_config"> {
  let summary = "AdamW, gradient clipping and learning-rate schedule settings";
  let description = [{
    Module-level settings read by `moe-optimizer`: AdamW (decoupled weight
    decay) with `beta1`, `beta2`, `eps`, `weight_decay`; global-norm gradient
    clipping at `max_grad_norm` (0 disables it); a learning rate warming up
    linearly to `lr` over `warmup` steps and decaying by a cosine to `min_lr`
    at step `decay_steps`. Absent, the defaults below apply; a module has at
    most one (`moe-optimizer` refuses several).

    Constraints: `0 <= beta1, beta2 < 1`, `eps > 0`, `lr >= min_lr >= 0`,
    `weight_decay >= 0`, `max_grad_norm >= 0`, `0 <= warmup <= decay_steps`.

    Example:

    ```mlir
    moe.adamw_config {lr = 3.0e-3 : f32, warmup = 20, decay_steps = 300}
    ```
  }];
  let arguments = (ins
    DefaultValuedAttr<F32Attr, "3.0e-4">:$lr,
    DefaultValuedAttr<F32Attr, "0.0">:$min_lr,
    DefaultValuedAttr<I64Attr, "100">:$warmup,
    DefaultValuedAttr<I64Attr, "10000">:$decay_steps,
    DefaultValuedAttr<F32Attr, "0.9">:$beta1,
    DefaultValuedAttr<F32Attr, "0.95">:$beta2,
    DefaultValuedAttr<F32Attr, "1.0e-8">:$eps,
    DefaultValuedAttr<F32Attr, "0.1">:$weight_decay,
    DefaultValuedAttr<F32Attr, "1.0">:$max_grad_norm
  );
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def MoE_MeshOp : MoE_Op<"mesh", [Symbol]> {
  let summary = "a logical mesh of ranks with named axes";
  let description = [{
    The ranks a training step runs on, as an N-D grid whose axes carry the
    parallelism they are used for: `dp` (data), `fsdp` (data, with sharded
    parameters and optimizer state), `ep` (experts; tokens are data-parallel
    over it too, so experts fold onto data-parallel ranks), `tp` (tensor).
    Rank `r` has row-major coordinates over the axes in the order listed.
    `moec --mesh dp=2,tp=2` sets it.

    Constraints: at least one axis; every axis is one of `dp`, `fsdp`,
    `ep` and `tp` (pipeline stages are not an axis: `moec --pp` cuts the
    step into stages) and appears once; every size is positive and the
    mesh has at most 2^20 ranks.

    Example:

    ```mlir
    moe.mesh @mesh(dp = 2, ep = 2, tp = 2)
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$shape);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of ranks.
    int64_t getNumRanks();
    /// The size of axis `name`, if the mesh has it.
    std::optional<int64_t> getAxisSize(::llvm::StringRef name);
  }];
}

def MoE_ShardOp : MoE_Op<"shard", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "pins the sharding of a value";
  let description = [{
    The identity on values that fixes how `input` is split over the mesh at
    this point; sharding propagation starts from these pins and never
    overrides them. Its gradient carries the same pin.

    Constraints: as `#moe.sharding` on the operand's type (mesh exists, one
    entry per dimension, known axes, divisible dimensions).

    Example:

    ```mlir
    %y = moe.shard %x {sharding = #moe.sharding<@mesh, [{dp}, {}, {tp} ]>}
        : tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins AnyTypeOf<[MoE_FloatTensor, MoE_I32Tensor]>:$input,
                       MoE_ShardingAttr:$sharding);
  let results = (outs AnyTypeOf<[MoE_FloatTensor, MoE_I32Tensor]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def MoE_ParamOp : MoE_Op<"param", [Symbol,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a named, persistent tensor: a weight or optimizer state";
  let description = [{
    Declares a persistent tensor by name. Weights use HF Mixtral tensor
    names; stacked expert weights carry `{e}` in their name where the expert
    index goes (`...experts.{e}.w1.weight`, shape `[E, F, H]`), and exporting
    splits them along dimension 0. Optimizer state is named
    `<param>.exp_avg` / `<param>.exp_avg_sq`. Under mixed precision each
    weight (the fp32 master) has a BF16 working copy `<param>.bf16` of kind
    `working_copy` naming it as its `master`: the forward and backward read
    the copy, the optimizer updates the master and rounds it into the copy,
    and the runtime derives the copy from the master instead of
    initialising or saving it.

    Constraints:
    * the type is a statically shaped f32 tensor, or bf16 for a working
      copy;
    * a working copy has a `master`, a weight of the same shape (and the
      same `sharding`), and no initialisation; no other parameter has a
      `master`;
    * a weight has an initialisation (`zeros`, `ones` or `normal`), and
      `init = normal` needs an `init_std`, which is in `(0, 1]` (as in
      `moe.transformer`, and as the runtime's artifact verifier checks);
      optimizer state is initialised with zeros;
    * `{e}` appears at most once, and only in a tensor of rank >= 2;
    * a `sharding` (how the parameter is stored across ranks; FSDP splits it
      over `fsdp`) is valid for its type; `sharding_origin` (why each
      dimension is split, written by moe-propagate-sharding's seeds) comes
      with a `sharding` and has one entry per dimension.

    Example:

    ```mlir
    moe.param @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
        {init = #moe.init<normal>, init_std = 2.0e-2 : f32}
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    TypeAttrOf<MoE_FloatTensor>:$type,
    DefaultValuedAttr<MoE_InitKindAttr, "InitKind::none">:$init,
    OptionalAttr<F32Attr>:$init_std,
    DefaultValuedAttr<MoE_ParamKindAttr, "ParamKind::weight">:$kind,
    UnitAttr:$no_weight_decay,
    OptionalAttr<MoE_ShardingAttr>:$sharding,
    OptionalAttr<StrArrayAttr>:$sharding_origin,
    OptionalAttr<FlatSymbolRefAttr>:$master
  );
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// A working copy's master: a weight of its shape and sharding.
    ::mlir::LogicalResult verifyMaster(::mlir::SymbolTableCollection &symbols);
  }];
}

def MoE_GetParamOp : MoE_Op<"get_param", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads the current value of a parameter";
  let description = [{
    The value of a `moe.param` at this point of the step. Its gradient is the
    gradient of the loss with respect to that parameter.

    Constraints: `param` names a `moe.param` whose type is the result type.

    Example:

    ```mlir
    %w = moe.get_param @"lm_head.weight" : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

def MoE_EmbeddingOp : MoE_Op<"embedding", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "token embedding lookup";
  let description = [{
    `result[b, s] = table[tokens[b, s]]`. A token id outside `[0, V)` is a
    runtime error naming its position.

    Constraints: `tokens` is `[B, S]` i32, `table` is `[V, H]`, the result is
    `[B, S, H]`.

    Example:

    ```mlir
    %h = moe.embedding %tokens, %table
        : (tensor<8x64xi32>, tensor<256x64xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_I32Tensor:$tokens, MoE_FloatTensor:$table);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_RMSNormOp : MoE_Op<"rms_norm", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "RMSNorm over the last dimension";
  let description = [{
    `y = w * x / sqrt(mean(x^2) + epsilon)` over the last dimension (HF
    `MixtralRMSNorm`). With `num_heads = n`, the last dimension is `n` heads
    of `d` features and each head is normalised on its own, all with the
    same `weight` of `d` (Qwen3's `q_norm` and `k_norm`, applied to each
    attention head's query and key).

    Constraints: the input has rank >= 2 (tokens by features); `weight` is
    1-D of the size of the input's last dimension, or of that size over
    `num_heads` (which then divides it, `num_heads >= 1`); the result has
    the input's type; `epsilon > 0`.

    Example:

    ```mlir
    %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32}
        : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    %q = moe.rms_norm %x, %wq {epsilon = 1.0e-6 : f32, num_heads = 4}
        : (tensor<8x64x64xf32>, tensor<16xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       F32Attr:$epsilon, OptionalAttr<I64Attr>:$num_heads);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_LinearOp : MoE_Op<"linear", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "matrix product with a weight in [out, in] layout";
  let description = [{
    `y[..., n] = sum_k x[..., k] * w[n, k]`, i.e. `y = x w^T` as PyTorch's
    `nn.Linear` without bias. Used for the attention projections, dense MLP
    projections, the router gate and the LM head. With `addend`, the product
    is added to it in the GEMM's epilogue (`y = addend + x w^T`, BLAS's
    beta = 1): `moe-fuse-gemm-epilogues` folds a residual add into the
    projection that feeds it.

    Constraints: `weight` is `[N, K]`, the input is `[..., K]` (rank >= 2),
    the result is `[..., N]` with the input's leading dimensions; `addend`
    has the result's type.

    Example:

    ```mlir
    %q = moe.linear %x, %wq
        : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %h = moe.linear %o, %wo, %residual
        : (tensor<8x64x64xf32>, tensor<64x64xf32>, tensor<8x64x64xf32>)
        -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       Optional<MoE_FloatTensor>:$addend);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_RoPEOp : MoE_Op<"rope", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "rotary position embedding, rotate-half convention";
  let description = [{
    Rotates each head of a `[B, S, num_heads * d]` tensor by the position
    `s`, with frequencies `theta^(-2i/d)` (HF `apply_rotary_pos_emb`). With
    `positions` (`[B, S]`, document masking), token `(b, s)` is rotated by
    `positions[b, s]`, its position in its document.

    With `scaling` (`#moe.rope_scaling`), the frequencies are stretched as
    it says (linear, YaRN, llama3) and cos and sin are multiplied by its
    attention factor.

    After partitioning, `sequence_axes` names the mesh axes the sequence is
    split over (context parallelism): the input is this rank's block of the
    sequence, load-balanced when `cp` leads the axes (rank `c` of `cp`
    holds chunks `c` and `2 cp - 1 - c` of `2 cp`), and each token is
    rotated by its position in the whole sequence.

    Constraints: the input is `[B, S, X]` with `X > 0` divisible by
    `num_heads > 0` and `X / num_heads` even; the result has the input's
    type; `theta > 0`; `positions`, when present, is `[B, S]`;
    `sequence_axes` are axes of the module's mesh, `cp` first if present.

    Example:

    ```mlir
    %qr = moe.rope %q {num_heads = 4, theta = 1.0e4 : f32}
        : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %qd = moe.rope %q, %positions {num_heads = 4, theta = 1.0e4 : f32}
        : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<8x64x64xf32>
    %qy = moe.rope %q {num_heads = 4, theta = 1.0e4 : f32,
        scaling = #moe.rope_scaling<linear, factor = 4.0>}
        : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input,
                       Optional<MoE_I32Tensor>:$positions,
                       I64Attr:$num_heads, F32Attr:$theta,
                       OptionalAttr<StrArrayAttr>:$sequence_axes,
                       OptionalAttr<MoE_RopeScalingAttr>:$scaling);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_AttentionOp : MoE_Op<"attention", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "causal scaled-dot-product attention with grouped-query heads";
  let description = [{
    Causal softmax attention, scale `scale_factor/sqrt(d)` (`scale_factor`
    1 when absent; DeepSeek's YaRN correction), where query head `h` reads
    key/value head `h / (num_heads / num_kv_heads)`. Also returns the
    log-sum-exp of each score row (`[B, num_heads, S]`), which the backward
    pass uses instead of storing the probabilities.

    The values may have a head dimension `dv` of their own (multi-head
    latent attention's `v_head_dim`); the output's heads are then `dv`
    wide.

    With `positions` (`[B, S]`, each token's position in its document:
    document masking), query `s` of sequence `b` sees the keys
    `[s - positions[b, s], s]` only, those of its own document.

    After partitioning, `sequence_axes` names the mesh axes the queries'
    sequence is split over (context parallelism): `query`, `output`, `lse`
    and `positions` are this rank's block of the sequence (load-balanced
    when `cp` leads the axes, as `moe.rope` says), while `key` and `value`
    are the whole sequence; causality and documents follow the positions
    in the whole sequence. With `ring` (moe-ring-attention), `key` and
    `value` are this rank's block too: the ranks of `sequence_axes` pass
    their blocks around a ring, each transfer overlapping the attention of
    the block before (ring attention); the results are the same.

    Constraints: `query` is `[B, S, num_heads * d]`, `key` is
    `[B, S, num_kv_heads * d]` and `value` `[B, S, num_kv_heads * dv]` with
    `d, dv > 0`; `num_heads` is a positive multiple of `num_kv_heads`;
    `output` is `[B, S, num_heads * dv]` of the query's element type and
    `lse` is `[B, num_heads, S]`; `positions`, when present, is `[B, S]`;
    `scale_factor`, when present, is finite and `> 0`.

    Example:

    ```mlir
    %o, %lse = moe.attention %q, %k, %v {num_heads = 4, num_kv_heads = 2}
        : (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>)
        -> (tensor<8x64x64xf32>, tensor<8x4x64xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$query, MoE_FloatTensor:$key,
                       MoE_FloatTensor:$value,
                       Optional<MoE_I32Tensor>:$positions, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads,
                       OptionalAttr<StrArrayAttr>:$sequence_axes,
                       UnitAttr:$ring, OptionalAttr<F32Attr>:$scale_factor);
  let results = (outs MoE_FloatTensor:$output, MoE_F32Tensor:$lse);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_ConcatHeadsOp : MoE_Op<"concat_heads", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "per-head concatenation of two tensors";
  let description = [{
    Each of `num_heads` heads of the result holds that head's part of `lhs`,
    then its part of `rhs`. `rhs` has `num_heads` parts, or one part that
    every head shares (multi-head latent attention's one RoPE key, which
    all query heads read).

    Constraints: `lhs` is `[..., num_heads * A]`; `rhs` is
    `[..., num_heads * C]` or `[..., C]`; the result is
    `[..., num_heads * (A + C)]`; all have the same leading dimensions and
    element type.

    Example:

    ```mlir
    %k = moe.concat_heads %k_nope, %k_rope {num_heads = 4}
        : (tensor<8x64x64xf32>, tensor<8x64x8xf32>) -> tensor<8x64x96xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$lhs, MoE_FloatTensor:$rhs,
                       I64Attr:$num_heads);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether every head shares the one part of rhs.
    bool hasSharedRhs();
  }];
}

def MoE_SplitHeadsOp : MoE_Op<"split_heads", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "per-head split of a tensor in two";
  let description = [{
    The inverse of `moe.concat_heads`: each of `num_heads` heads of the
    input gives its first features to `lhs` and the rest to `rhs`. With a
    shared `rhs` (one part of the heads' width), `rhs` is the sum over the
    heads of their parts: the adjoint of sharing it, so that
    `moe.split_heads` is `moe.concat_heads`' gradient and the other way
    round.

    Constraints: the input is `[..., num_heads * (A + C)]`; `lhs` is
    `[..., num_heads * A]`; `rhs` is `[..., num_heads * C]` or `[..., C]`;
    all have the same leading dimensions and element type.

    Example:

    ```mlir
    %q_nope, %q_rope = moe.split_heads %q {num_heads = 4}
        : (tensor<8x64x96xf32>) -> (tensor<8x64x64xf32>, tensor<8x64x32xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, I64Attr:$num_heads);
  let results = (outs MoE_FloatTensor:$lhs, MoE_FloatTensor:$rhs);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether rhs is the sum of the heads' parts.
    bool hasSharedRhs();
  }];
}

def MoE_RouterOp : MoE_Op<"router", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "expert scores, top-k selection and routing weights";
  let description = [{
    From gate logits `[..., E]`, per token:
    * the scores `probs`: the softmax over all experts (`scoring =
      #moe.scoring<softmax>`, the default) or each logit's sigmoid
      (`#moe.scoring<sigmoid>`, DeepSeek-V3);
    * the selection: the `top_k` experts of largest `probs + bias`
      (descending, ties to the lower id; `bias`, DeepSeek-V3's
      `e_score_correction_bias`, only steers the choice). With `groups =
      G > 1`, the experts form `G` groups of `E / G` consecutive ids, each
      group scores the sum of its two largest `probs + bias`, and only the
      experts of the `top_groups` best groups are candidates (DeepSeek's
      `n_group`, `topk_group`);
    * the routing `weights`: the selected experts' scores, divided by their
      sum when `normalize` (HF's `norm_topk_prob`; Mixtral always does; the
      sigmoid sum has 1e-20 added, as HF's), times `scale` (DeepSeek's
      `routed_scaling_factor`).

    With `capacity_factor > 0`, each expert admits at most
    `ceil(capacity_factor * T * top_k / E)` assignments, first choices first;
    the index of a dropped assignment is -1.

    Constraints: `logits` is `[..., E]`; `probs` has its type; `bias` is
    `[E]`; `weights` (f32) and `indices` (i32) are `[..., top_k]`;
    `1 <= top_k <= E`; `0 <= capacity_factor <= E` (as in
    `moe.transformer`); `scale > 0`; `groups >= 1` divides `E`, with at
    least two experts per group when `groups > 1`;
    `1 <= top_groups <= groups`, and the `top_groups` groups hold at least
    `top_k` experts.

    Example:

    ```mlir
    %p, %w, %i = moe.router %logits {top_k = 2, capacity_factor = 0.0 : f32}
        : (tensor<8x64x4xf32>)
        -> (tensor<8x64x4xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>)
    %sp, %sw, %si = moe.router %logits bias %b {top_k = 2,
        scoring = #moe.scoring<sigmoid>, scale = 2.5 : f32, groups = 2,
        top_groups = 1} : (tensor<8x64x4xf32>, tensor<4xf32>)
        -> (tensor<8x64x4xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>)
    ```
  }];
  let arguments = (ins MoE_F32Tensor:$logits, Optional<MoE_F32Tensor>:$bias,
                       I64Attr:$top_k,
                       DefaultValuedAttr<F32Attr, "0.0">:$capacity_factor,
                       DefaultValuedAttr<MoE_RouterScoringAttr,
                           "::mlir::moe::RouterScoring::softmax">:$scoring,
                       DefaultValuedAttr<BoolAttr, "true">:$normalize,
                       DefaultValuedAttr<F32Attr, "1.0">:$scale,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<I64Attr, "1">:$top_groups);
  let results = (outs MoE_F32Tensor:$probs, MoE_F32Tensor:$weights,
                      MoE_I32Tensor:$indices);
  let assemblyFormat = [{
    $logits (`bias` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether this is HF Mixtral's router: softmax, renormalised, unscaled,
    /// one group, no bias (the artifact's first Router opcode).
    bool isMixtralRouter();
  }];
}

def MoE_ExpertsOp : MoE_Op<"experts", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "grouped SwiGLU experts combined with router weights";
  let description = [{
    `y[t] = sum_j weights[t,j] * w2[e] (silu(w1[e] x[t]) * (w3[e] x[t]))`
    over the assignments `e = indices[t,j] >= 0`. Expert weights are stacked
    along dimension 0. Tokens are grouped per expert so that each expert is
    one GEMM (the runtime's grouped kernel).

    Expert parallelism: after partitioning, `expert_axes` names the mesh axes
    the experts are distributed over (rank `r` of that group holds experts
    `[r * El, (r + 1) * El)`, `El` = the local `w1.shape[0]`) while each rank
    of the group has its own tokens; `indices` stay global expert ids, and
    the runtime sends every assignment's token to its expert's rank and the
    result back (all-to-all dispatch and combine with per-rank counts).

    FP8: with `fp8` (see `#moe.fp8`), every expert GEMM reads its inputs
    rounded to FP8 (tokens, SwiGLU activations and weights in E4M3), scaled
    per tensor or, with `blockwise`, per `fp8_block` block; the VJP rounds
    the same values and the gradients. With `delayed` scaling, the op reads
    its scales from the amax history `fp8_history` and folds this step's
    amaxes into it (so it writes that parameter; `moe.fp8_amax_update` ends
    the step). With `fp8_dispatch`, expert parallelism sends the tokens to
    the experts as FP8 codes with one scale per `fp8_block` (128) elements of
    a row; without `fp8`, that is all FP8 does (a target without FP8 tensor
    cores: the GEMMs read full precision).

    Saved activations: with a second result, `hidden` (f32,
    `[..., k, 2, F]`), the op also returns each assignment's up projections
    `hidden[t, j] = (w1[e] x[t], w3[e] x[t])` for `e = indices[t, j]`, zeros
    for a dropped one, as its GEMMs computed them, for `moe.experts_grad`
    to read instead of recomputing them (`moe-save-expert-activations` adds
    it, `moe-rematerialize` drops it under a memory budget). Not with
    `expert_axes`: those rows would live on the experts' ranks.

    Constraints: `input` is `[..., H]`; `weights` (f32) and `indices` (i32)
    are `[..., k]` with the input's leading dimensions; `w1` and `w3` are
    `[E, F, H]`, `w2` is `[E, H, F]`; the result has the input's type;
    `fp8_block` (positive) goes with `fp8 = #moe.fp8<blockwise>` or with
    `fp8_dispatch` alone; `fp8_history` goes with `#moe.fp8<delayed>`, which
    needs it, and names a `moe.param` of kind `fp8_history` of shape
    `[E, 9, L]`, `L >= 2` (E the global number of experts).

    Example:

    ```mlir
    %y = moe.experts %x, %w, %i, %w1, %w3, %w2
        : (tensor<8x64x64xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>,
           tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>)
        -> tensor<8x64x64xf32>
    %y, %h = moe.experts %x, %w, %i, %w1, %w3, %w2
        : (tensor<8x64x64xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>,
           tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>)
        -> (tensor<8x64x64xf32>, tensor<8x64x2x2x128xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_F32Tensor:$weights,
                       MoE_I32Tensor:$indices, MoE_FloatTensor:$w1,
                       MoE_FloatTensor:$w3, MoE_FloatTensor:$w2,
                       OptionalAttr<StrArrayAttr>:$expert_axes,
                       OptionalAttr<MoE_Fp8ScalingAttr>:$fp8,
                       OptionalAttr<I64Attr>:$fp8_block,
                       UnitAttr:$fp8_dispatch,
                       OptionalAttr<FlatSymbolRefAttr>:$fp8_history);
  let results = (outs MoE_FloatTensor:$result,
                      Optional<MoE_F32Tensor>:$hidden);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_SwiGLUOp : MoE_Op<"swiglu", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "silu(gate) * up, elementwise";
  let description = [{
    The gated activation of a SwiGLU MLP: `silu(gate) * up` with
    `silu(a) = a * sigmoid(a)`.

    Constraints: `gate`, `up` and the result have one type.

    Example:

    ```mlir
    %a = moe.swiglu %gate, %up : tensor<8x64x128xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$gate, MoE_FloatTensor:$up);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` type($result)";
}

def MoE_AddOp : MoE_Op<"add", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure, Commutative, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "elementwise sum (residual connections, gradient fan-in)";
  let description = [{
    Constraints: both operands and the result have one type.

    Example:

    ```mlir
    %y = moe.add %x, %r : tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$lhs, MoE_FloatTensor:$rhs);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` type($result)";
}

def MoE_CrossEntropyOp : MoE_Op<"cross_entropy", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "mean next-token cross-entropy, ignoring negative targets";
  let description = [{
    The mean over tokens with `targets >= 0` of
    `logsumexp(logits[t]) - logits[t, targets[t]]` (0 when there are none).
    After partitioning, `token_axes` names the mesh axes the tokens are split
    over: the sum and the count of valid tokens are then summed over them, so
    every rank gets the mean over the whole batch.

    Constraints: `logits` is `[..., V]`, `targets` is i32 with the logits'
    leading dimensions; the result is a 0-d f32 tensor.

    Example:

    ```mlir
    %ce = moe.cross_entropy %logits, %targets
        : (tensor<8x64x256xf32>, tensor<8x64xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$logits, MoE_I32Tensor:$targets,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_LinearCrossEntropyOp : MoE_Op<"linear_cross_entropy", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "the LM head fused with the mean cross-entropy";
  let description = [{
    `moe.cross_entropy(moe.linear(input, weight), targets)` without the
    `[..., V]` logits: the kernel computes them block of vocabulary by block
    and keeps only each token's log-sum-exp (`lse`), which the backward
    reads to recompute the blocks instead of storing the logits and their
    gradient. `moe-fuse-linear-cross-entropy` forms it. `token_axes` as in
    `moe.cross_entropy`.

    Constraints: `weight` is `[V, H]`, the input is `[..., H]` (rank >= 2),
    `targets` is i32 with the input's leading dimensions, the loss is a 0-d
    f32 tensor and `lse` is f32 with the input's leading dimensions.

    Example:

    ```mlir
    %loss, %lse = moe.linear_cross_entropy %h, %w, %targets
        : (tensor<8x64x64xf32>, tensor<256x64xf32>, tensor<8x64xi32>)
        -> (tensor<f32>, tensor<8x64xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       MoE_I32Tensor:$targets,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_F32Scalar:$loss, MoE_F32Tensor:$lse);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_AuxLossOp : MoE_Op<"aux_loss", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "load-balancing loss of one MoE layer";
  let description = [{
    `E * sum_e (count[e] / T) * mean_t probs[t, e]`, with `count[e]` the
    number of top-`top_k` selections of expert `e` (recomputed from `probs`,
    before capacity dropping). Only `probs` carries gradient. After
    partitioning, `token_axes` names the mesh axes the tokens are split over;
    counts and probability sums are summed over them first.

    Constraints: `probs` is `[..., E]` with `1 <= top_k <= E`; the result is
    a 0-d f32 tensor.

    Example:

    ```mlir
    %aux = moe.aux_loss %p {top_k = 2} : (tensor<8x64x4xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins MoE_F32Tensor:$probs, I64Attr:$top_k,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_SequenceAuxLossOp : MoE_Op<"sequence_aux_loss", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "sequence-wise load-balancing loss of one MoE layer";
  let description = [{
    DeepSeek-V3's complementary sequence-wise balance loss, the mean over
    the `B` sequences of

    `L_b = sum_e f[b, e] * P[b, e]`, `f[b, e] = E / (K * S) * count[b, e]`,
    `P[b, e] = mean_s probs[b, s, e] / sum_j probs[b, s, j]`,

    with `count[b, e]` the assignments of sequence `b` the router admitted
    to expert `e` (`indices`, the router's own selection, bias and groups
    included; a slot dropped by capacity, -1, counts nowhere), `K` the
    slots per token and `S` the sequence's length. Only `probs` carries
    gradient. After partitioning, `sequence_axes` names the mesh axes the
    sequence dimension is split over (its counts and score sums are summed
    over them first) and `batch_axes` those the sequences are split over
    (the mean spans every rank's sequences).

    Constraints: `probs` is f32 `[B, S, E]`; `indices` is i32 `[B, S, K]`
    with `1 <= K <= E`; the result is a 0-d f32 tensor.

    Example:

    ```mlir
    %l = moe.sequence_aux_loss %p, %i
        : (tensor<8x64x4xf32>, tensor<8x64x2xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins MoE_F32Tensor:$probs, MoE_I32Tensor:$indices,
                       OptionalAttr<StrArrayAttr>:$batch_axes,
                       OptionalAttr<StrArrayAttr>:$sequence_axes);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_ZLossOp : MoE_Op<"z_loss", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "router z-loss of one MoE layer";
  let description = [{
    ST-MoE's router z-loss, `mean_t (log sum_e exp logits[t, e])^2`: it
    keeps the gate logits small, where softmax routing is stable. After
    partitioning, `token_axes` names the mesh axes the tokens are split
    over; the sum and the token count are summed over them first.

    Constraints: `logits` is f32 `[..., E]` of rank >= 2; the result is a
    0-d f32 tensor.

    Example:

    ```mlir
    %z = moe.z_loss %logits : (tensor<8x64x4xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins MoE_F32Tensor:$logits,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_ExpertLoadOp : MoE_Op<"expert_load", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "adds a router's per-expert token counts to the step's";
  let description = [{
    `load[e] += #{(t, j) : indices[t, j] = e}`: the assignments the router
    admitted (a slot dropped by capacity, -1, counts nowhere), in place on
    `load` (a `moe.param` of kind `expert_load`, `[E]`), which
    `moe.expert_load_update` reads and clears at the end of the step. Every
    microbatch adds its own. After partitioning, `token_axes` names the
    mesh axes the tokens are split over: the counts are first summed over
    them, so every rank holds the load of the whole batch (DeepSeek-V3
    balances on the loads of all data-parallel ranks).

    With `bias` (a `moe.param` of kind `router_bias`, `[E]`, the router's
    selection bias) and `bias_update_rate > 0`, the step's end also moves
    that bias (auxiliary-loss-free balancing, see `moe.expert_load_update`).

    Constraints: `indices` is i32 `[..., k]`; `load` names a `moe.param` of
    kind `expert_load` of shape `[E]`; `bias`, when given, one of kind
    `router_bias` of the same shape, and then `bias_update_rate > 0`;
    without it the rate is 0.

    Example:

    ```mlir
    moe.expert_load %indices {load = @"model.layers.1.block_sparse_moe.gate.tokens_per_expert"}
        : tensor<8x64x2xi32>
    ```
  }];
  let arguments = (ins MoE_I32Tensor:$indices, FlatSymbolRefAttr:$load,
                       OptionalAttr<FlatSymbolRefAttr>:$bias,
                       DefaultValuedAttr<F32Attr, "0.0">:$bias_update_rate,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let assemblyFormat = "$indices attr-dict `:` type($indices)";
  let hasVerifier = 1;
}

def MoE_ExpertLoadUpdateOp : MoE_Op<"expert_load_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "ends a step's expert load: balances the bias, clears";
  let description = [{
    With `bias`: DeepSeek-V3's auxiliary-loss-free balancing,
    `bias[e] += rate * sign(mean(load) - load[e])` (an overloaded expert
    becomes less likely to be chosen, an underloaded one more; sign(0) =
    0). Then `load` starts the next step from zero. `moe-optimizer` places
    one per `moe.expert_load`, after the AdamW updates; the runtime reports
    each layer's load (min, max, coefficient of variation) from `load` as
    it is before the update.

    Constraints: `load` names a `moe.param` of kind `expert_load`; `bias`,
    when given, one of kind `router_bias` of the same shape, and then
    `rate > 0`; without it `rate` is 0.

    Example:

    ```mlir
    moe.expert_load_update {load = @"model.layers.1.block_sparse_moe.gate.tokens_per_expert",
        bias = @"model.layers.1.block_sparse_moe.gate.e_score_correction_bias",
        rate = 1.0e-3 : f32}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$load,
                       OptionalAttr<FlatSymbolRefAttr>:$bias,
                       DefaultValuedAttr<F32Attr, "0.0">:$rate);
  let assemblyFormat = "attr-dict";
}

def MoE_WeightedSumOp : MoE_Op<"weighted_sum", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    DeclareOpInterfaceMethods<MoE_DifferentiableOpInterface>]> {
  let summary = "sum of scalars with constant coefficients";
  let description = [{
    `sum_i coefficients[i] * inputs[i]`: combines the cross-entropy and the
    load-balancing losses into the training loss.

    Constraints: at least one input; one coefficient per input.

    Example:

    ```mlir
    %loss = moe.weighted_sum %ce, %aux0 {coefficients = array<f32: 1.0, 0.01>}
        : (tensor<f32>, tensor<f32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<MoE_F32Scalar>:$inputs,
                       DenseF32ArrayAttr:$coefficients);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_ConstantOp : MoE_Op<"constant", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure, ConstantLike]> {
  let summary = "a tensor filled with one value";
  let description = [{
    The seed of backpropagation (`1.0` for the loss) and zero gradients.

    Constraints: the value is finite (as every float attribute of the
    dialect).

    Example:

    ```mlir
    %one = moe.constant 1.0 : tensor<f32>
    ```
  }];
  let arguments = (ins F32Attr:$value);
  let results = (outs MoE_F32Tensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  // Folds to its splat value, as ConstantLike ops must, so that MLIR's
  // canonicalizer and CSE can deduplicate constants.
  let hasFolder = 1;
}

def MoE_CastOp : MoE_Op<"cast", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>, Pure]> {
  let summary = "converts a tensor between fp32 and bf16";
  let description = [{
    The same values in the other float type: fp32 to bf16 rounds to nearest
    even (keeping NaNs quiet), bf16 to fp32 is exact. Mixed precision
    (`moe-mixed-precision`) inserts it where a value changes dtype, e.g.
    BF16 weight gradients reduced over ranks and then summed by the fp32
    optimizer (`--grad-reduce-dtype=bf16`). A cast does not commute with a
    sum over ranks, so its sharding rule takes no partial sum: a pending
    reduction runs before it, in the input's dtype.

    Constraints: the result has the input's shape and the other element
    type.

    Example:

    ```mlir
    %g32 = moe.cast %g : tensor<64x64xbf16> to tensor<64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives (inserted by moe-partition over groups of the mesh)
//===----------------------------------------------------------------------===//

class MoE_CollectiveOp<string mnemonic, Type element,
                       list<Trait> traits = []>
    : MoE_Op<mnemonic, !listconcat(traits, [
          DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let arguments = (ins element:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs element:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type($input, $result)";
  let hasVerifier = 1;
}

def MoE_AllReduceOp : MoE_Op<"all_reduce", [SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "sum over the ranks of a mesh group";
  let description = [{
    Every rank of the group (the ranks that differ only on `axes`) gets the
    sum of the group's `input`s: completes partial sums (row-parallel
    outputs, data-parallel gradients).

    Constraints: `mesh` names a moe.mesh with all of `axes`, each at most
    once.

    Example:

    ```mlir
    %g = moe.all_reduce %p {mesh = @mesh, axes = ["dp"]} : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

// Gathers and slices also move ids (tokens, expert indices).
def MoE_AnyTensor : AnyTypeOf<[MoE_FloatTensor, MoE_I32Tensor]>;

def MoE_AllGatherOp : MoE_CollectiveOp<"all_gather", MoE_AnyTensor,
    [AllElementTypesMatch<["input", "result"]>]> {
  let summary = "concatenates the group's blocks along a dimension";
  let description = [{
    The group's inputs concatenated along `dim` in group order (the ranks'
    coordinates on `axes`, row-major, first axis outermost): turns a tensor
    split over `axes` along `dim` into one that is not (FSDP's gather before
    use, sequence parallelism's gather).

    Constraints: `mesh` names a moe.mesh with all of `axes`, each at most
    once; `dim` is a dimension of the input; the result is the input with
    `dim` multiplied by the group size.

    Example:

    ```mlir
    %w = moe.all_gather %s {mesh = @mesh, axes = ["fsdp"], dim = 0}
        : (tensor<32x64xf32>) -> tensor<64x64xf32>
    ```
  }];
}

def MoE_ReduceScatterOp : MoE_CollectiveOp<"reduce_scatter", MoE_FloatTensor> {
  let summary = "sums over the group and keeps this rank's block";
  let description = [{
    The sum of the group's inputs, split along `dim` into group-size blocks;
    each rank keeps its own (FSDP's gradient reduce-scatter).

    Constraints: as `moe.all_gather`, with the result's `dim` divided by the
    group size.

    Example:

    ```mlir
    %g = moe.reduce_scatter %p {mesh = @mesh, axes = ["fsdp"], dim = 0}
        : (tensor<64x64xf32>) -> tensor<32x64xf32>
    ```
  }];
}

def MoE_SliceOp : MoE_CollectiveOp<"slice", MoE_AnyTensor,
    [AllElementTypesMatch<["input", "result"]>]> {
  let summary = "keeps this rank's block of a replicated tensor";
  let description = [{
    The block of `dim` this rank holds when the tensor is split over `axes`:
    no communication, only the rank's coordinates.

    Constraints: as `moe.reduce_scatter`.

    Example:

    ```mlir
    %s = moe.slice %g {mesh = @mesh, axes = ["fsdp"], dim = 0}
        : (tensor<64x64xf32>) -> tensor<32x64xf32>
    ```
  }];
}

def MoE_ReduceBucketOp : MoE_Op<"reduce_bucket", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "several reductions over one group in one message";
  let description = [{
    Result `i` is what `moe.all_reduce` of input `i` gives, or with
    `scatter` what `moe.reduce_scatter` along dimension 0 gives, for every
    input at once: the backends pack the inputs into one buffer and run one
    collective on it (a gradient bucket, as DDP's and FSDP's). The sums are
    elementwise, so the values are those of the separate reductions.
    moe-bucket-reductions makes it.

    Constraints: at least one input, one result per input, all of one
    element type; `mesh` names a moe.mesh with all of `axes`, each at most
    once; a result has its input's type, or with `scatter` its input's
    shape with dimension 0 divided by the group size.

    Example:

    ```mlir
    %a, %b = moe.reduce_bucket %ga, %gb {mesh = @mesh, axes = ["dp"]}
        : (tensor<64xf32>, tensor<64x64xf32>) -> (tensor<64xf32>, tensor<64x64xf32>)
    ```
  }];
  let arguments = (ins Variadic<MoE_FloatTensor>:$inputs,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       UnitAttr:$scatter);
  let results = (outs Variadic<MoE_FloatTensor>:$results);
  let assemblyFormat =
      "$inputs attr-dict `:` functional-type($inputs, $results)";
  let hasVerifier = 1;
}

def MoE_PipelineGradientSumOp : MoE_Op<"pipeline_gradient_sum", [
    SameOperandsAndResultType]> {
  let summary = "a shared parameter's gradient, summed over two pipeline stages";
  let description = [{
    `lhs + rhs`, where one operand is computed on this op's pipeline stage
    and the other on another stage: the two halves of the gradient of a
    parameter that both stages hold (tied embeddings, read by the lookup on
    the first stage and by the LM head on the last). Each stage holding the
    parameter runs one such op in its optimizer phase on the gradients
    summed over the microbatches. The stages exchange their halves and add
    them in operand order, so both get the same bits and their AdamW
    updates keep the copies equal (Megatron's embedding group).
    moe-split-pipeline-stages makes it.

    Constraints: the operands and the result have one f32 type.

    Example:

    ```mlir
    %g = moe.pipeline_gradient_sum %head, %lookup : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins MoE_F32Tensor:$lhs, MoE_F32Tensor:$rhs);
  let results = (outs MoE_F32Tensor:$result);
  let assemblyFormat = "operands attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Gradient ops (derived by moe-autodiff; see docs/semantics.md "Backward")
//===----------------------------------------------------------------------===//

def MoE_EmbeddingGradOp : MoE_Op<"embedding_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of the embedding table";
  let description = [{
    Scatter-adds the rows of `grad` into a zero `[V, H]` table at the token
    ids.

    Constraints: `grad` is `[B, S, H]`, `tokens` `[B, S]`, the result `[V, H]`.

    Example:

    ```mlir
    %dtable = moe.embedding_grad %dy, %tokens
        : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_I32Tensor:$tokens);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_RMSNormGradOp : MoE_Op<"rms_norm_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradients of RMSNorm's input and weight";
  let description = [{
    Constraints: `grad` and `input` have one type, which is that of
    `input_grad`; `weight` and `weight_grad` are 1-D of the last dimension;
    `epsilon > 0`.

    Example:

    ```mlir
    %dx, %dw = moe.rms_norm_grad %dy, %x, %w {epsilon = 1.0e-5 : f32}
        : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<64xf32>)
        -> (tensor<8x64x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_FloatTensor:$input,
                       MoE_FloatTensor:$weight, F32Attr:$epsilon,
                       OptionalAttr<I64Attr>:$num_heads);
  let results = (outs MoE_FloatTensor:$input_grad, MoE_FloatTensor:$weight_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_LinearGradInputOp : MoE_Op<"linear_grad_input", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of a linear layer's input: dy w";
  let description = [{
    Kept apart from the weight gradient so that schedules may run the two at
    different times (zero-bubble pipelines). With `addend`, the product is
    added to it in the GEMM's epilogue: `moe-fuse-gemm-epilogues` folds the
    sum of a value's gradient contributions (the q, k and v projections',
    the residual stream's) into the GEMM that makes one of them.

    Constraints: `grad` is `[..., N]`, `weight` `[N, K]`, the result
    `[..., K]` with `grad`'s leading dimensions; `addend` has the result's
    type.

    Example:

    ```mlir
    %dx = moe.linear_grad_input %dy, %w
        : (tensor<8x64x32xf32>, tensor<32x64xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_FloatTensor:$weight,
                       Optional<MoE_FloatTensor>:$addend);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_LinearGradWeightOp : MoE_Op<"linear_grad_weight", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of a linear layer's weight: dy^T x";
  let description = [{
    Constraints: `grad` is `[..., N]`, `input` `[..., K]` with the same
    leading dimensions, the result `[N, K]`.

    Example:

    ```mlir
    %dw = moe.linear_grad_weight %dy, %x
        : (tensor<8x64x32xf32>, tensor<8x64x64xf32>) -> tensor<32x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_FloatTensor:$input);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_RoPEGradOp : MoE_Op<"rope_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of RoPE: the inverse rotation";
  let description = [{
    Constraints: as `moe.rope`, `positions` too.

    Example:

    ```mlir
    %dx = moe.rope_grad %dy {num_heads = 4, theta = 1.0e4 : f32}
        : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad,
                       Optional<MoE_I32Tensor>:$positions,
                       I64Attr:$num_heads, F32Attr:$theta,
                       OptionalAttr<StrArrayAttr>:$sequence_axes,
                       OptionalAttr<MoE_RopeScalingAttr>:$scaling);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_AttentionGradOp : MoE_Op<"attention_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradients of attention's query, key and value";
  let description = [{
    Recomputes the probabilities from the forward's `lse`
    (FlashAttention's backward). `sequence_axes`, `ring` and
    `scale_factor` as in `moe.attention`; with `ring` the key and value gradients are this
    rank's block, their accumulators travelling the ring behind the blocks.

    Constraints: `grad` and `output` have the query's type; `lse` is
    `[B, num_heads, S]`; the results have the types of query, key and value;
    shapes as `moe.attention`, `positions` too.

    Example:

    ```mlir
    %dq, %dk, %dv = moe.attention_grad %do, %q, %k, %v, %o, %lse
        {num_heads = 4, num_kv_heads = 2}
        : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>,
           tensor<8x64x32xf32>, tensor<8x64x64xf32>, tensor<8x4x64xf32>)
        -> (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_FloatTensor:$query,
                       MoE_FloatTensor:$key, MoE_FloatTensor:$value,
                       MoE_FloatTensor:$output, MoE_F32Tensor:$lse,
                       Optional<MoE_I32Tensor>:$positions,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       OptionalAttr<StrArrayAttr>:$sequence_axes,
                       UnitAttr:$ring, OptionalAttr<F32Attr>:$scale_factor);
  let results = (outs MoE_FloatTensor:$query_grad, MoE_FloatTensor:$key_grad,
                      MoE_FloatTensor:$value_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_RouterGradOp : MoE_Op<"router_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure,
    AttrSizedOperandSegments]> {
  let summary = "gradient of the gate logits";
  let description = [{
    From the gradient of the routing weights and, optionally, of the scores
    (the load-balancing loss), through the weights' normalisation and
    scale and the softmax or sigmoid (see `moe.router`, whose attributes
    this op repeats). The selection is recomputed from `probs` and `bias`;
    `bias` carries no gradient.

    Constraints: `weights_grad` is `[..., top_k]`, `probs` and `probs_grad`
    and the result are `[..., E]`, `bias` is `[E]`; the attributes as
    `moe.router`'s.

    Example:

    ```mlir
    %dlogits = moe.router_grad %dw, %p, %dp {top_k = 2}
        : (tensor<8x64x2xf32>, tensor<8x64x4xf32>, tensor<8x64x4xf32>)
        -> tensor<8x64x4xf32>
    ```
  }];
  let arguments = (ins MoE_F32Tensor:$weights_grad, MoE_F32Tensor:$probs,
                       Optional<MoE_F32Tensor>:$probs_grad,
                       Optional<MoE_F32Tensor>:$bias, I64Attr:$top_k,
                       DefaultValuedAttr<MoE_RouterScoringAttr,
                           "::mlir::moe::RouterScoring::softmax">:$scoring,
                       DefaultValuedAttr<BoolAttr, "true">:$normalize,
                       DefaultValuedAttr<F32Attr, "1.0">:$scale,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<I64Attr, "1">:$top_groups);
  let results = (outs MoE_F32Tensor:$result);
  let assemblyFormat = [{
    $weights_grad `,` $probs (`,` $probs_grad^)? (`bias` $bias^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether the forward was HF Mixtral's router (see moe.router).
    bool isMixtralRouter();
  }];
}

def MoE_ExpertsGradOp : MoE_Op<"experts_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "gradients of the experts' input, weights and parameters";
  let description = [{
    Reads each assignment's `w1 x` and `w3 x` from `hidden`, the forward's
    saved up projections (see `moe.experts`), when given; recomputes them
    otherwise. Both give the same values.
    With `expert_axes` (see `moe.experts`), tokens, their gradients and
    routing weights travel to the experts' ranks; the weight gradients are
    then summed over the tokens of the whole group.

    Constraints: `grad` has the input's type; operands as `moe.experts`,
    `hidden` as its second result; the results have the types of `input`,
    `weights`, `w1`, `w3`, `w2`.

    Example:

    ```mlir
    %dx, %dw, %dw1, %dw3, %dw2 = moe.experts_grad %dy, %x, %w, %i, %w1, %w3, %w2
        : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x2xf32>,
           tensor<8x64x2xi32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>,
           tensor<4x64x128xf32>)
        -> (tensor<8x64x64xf32>, tensor<8x64x2xf32>, tensor<4x128x64xf32>,
            tensor<4x128x64xf32>, tensor<4x64x128xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_FloatTensor:$input,
                       MoE_F32Tensor:$weights, MoE_I32Tensor:$indices,
                       MoE_FloatTensor:$w1, MoE_FloatTensor:$w3,
                       MoE_FloatTensor:$w2, Optional<MoE_F32Tensor>:$hidden,
                       OptionalAttr<StrArrayAttr>:$expert_axes,
                       OptionalAttr<MoE_Fp8ScalingAttr>:$fp8,
                       OptionalAttr<I64Attr>:$fp8_block,
                       UnitAttr:$fp8_dispatch,
                       OptionalAttr<FlatSymbolRefAttr>:$fp8_history);
  let results = (outs MoE_FloatTensor:$input_grad, MoE_F32Tensor:$weights_grad,
                      MoE_FloatTensor:$w1_grad, MoE_FloatTensor:$w3_grad,
                      MoE_FloatTensor:$w2_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_SwiGLUGradOp : MoE_Op<"swiglu_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure, AllTypesMatch<["grad",
    "gate", "up", "gate_grad", "up_grad"]>]> {
  let summary = "gradients of silu(gate) * up";
  let description = [{
    Constraints: the gradient, both inputs and both results have one type.

    Example:

    ```mlir
    %dg, %du = moe.swiglu_grad %dy, %g, %u : tensor<8x64x128xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$grad, MoE_FloatTensor:$gate,
                       MoE_FloatTensor:$up);
  let results = (outs MoE_FloatTensor:$gate_grad, MoE_FloatTensor:$up_grad);
  let assemblyFormat = "operands attr-dict `:` type($grad)";
}

def MoE_CrossEntropyGradOp : MoE_Op<"cross_entropy_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of the logits of the mean cross-entropy";
  let description = [{
    Constraints: `grad` is a 0-d f32 tensor; `logits` and `targets` as in
    `moe.cross_entropy`; the result has the logits' type.

    Example:

    ```mlir
    %dlogits = moe.cross_entropy_grad %dl, %logits, %targets
        : (tensor<f32>, tensor<8x64x256xf32>, tensor<8x64xi32>)
        -> tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins MoE_F32Scalar:$grad, MoE_FloatTensor:$logits,
                       MoE_I32Tensor:$targets,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_LinearCrossEntropyGradOp : MoE_Op<"linear_cross_entropy_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradients of the input and weight of the fused LM head loss";
  let description = [{
    What `moe.cross_entropy_grad`, `moe.linear_grad_input` and
    `moe.linear_grad_weight` compute for the unfused LM head, from the
    forward's `lse`: each block of logits is recomputed, turned into its
    gradient and consumed by the two products before the next block.

    Constraints: `grad` is a 0-d f32 tensor; `input`, `weight`, `targets`
    and `lse` as in `moe.linear_cross_entropy`; `input_grad` has the
    input's type and `weight_grad` the weight's shape (fp32 for a BF16
    working copy).

    Example:

    ```mlir
    %dh, %dw = moe.linear_cross_entropy_grad %dl, %h, %w, %targets, %lse
        : (tensor<f32>, tensor<8x64x64xf32>, tensor<256x64xf32>,
           tensor<8x64xi32>, tensor<8x64xf32>)
        -> (tensor<8x64x64xf32>, tensor<256x64xf32>)
    ```
  }];
  let arguments = (ins MoE_F32Scalar:$grad, MoE_FloatTensor:$input,
                       MoE_FloatTensor:$weight, MoE_I32Tensor:$targets,
                       MoE_F32Tensor:$lse,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_FloatTensor:$input_grad,
                      MoE_FloatTensor:$weight_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_AuxLossGradOp : MoE_Op<"aux_loss_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of the router probabilities of the load-balancing loss";
  let description = [{
    Constraints: `grad` is a 0-d f32 tensor; the result has the type of
    `probs`, which is `[..., E]` with `1 <= top_k <= E`.

    Example:

    ```mlir
    %dp = moe.aux_loss_grad %dl, %p {top_k = 2}
        : (tensor<f32>, tensor<8x64x4xf32>) -> tensor<8x64x4xf32>
    ```
  }];
  let arguments = (ins MoE_F32Scalar:$grad, MoE_F32Tensor:$probs,
                       I64Attr:$top_k,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_F32Tensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_SequenceAuxLossGradOp : MoE_Op<"sequence_aux_loss_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of the router scores of the sequence-wise loss";
  let description = [{
    `dprobs[b, s, e] = grad / B * (g[b, e] - sum_j g[b, j] * q[b, s, j]) /
    Z[b, s]`, with `Z[b, s] = sum_j probs[b, s, j]`, `q = probs / Z` and
    `g[b, e] = E * count[b, e] / (K * S^2)` (`moe.sequence_aux_loss`'s
    terms); the axes are those of the forward op.

    Constraints: `grad` is a 0-d f32 tensor; `probs` is f32 `[B, S, E]`,
    `indices` i32 `[B, S, K]` with `1 <= K <= E`; the result has the type
    of `probs`.

    Example:

    ```mlir
    %dp = moe.sequence_aux_loss_grad %dl, %p, %i
        : (tensor<f32>, tensor<8x64x4xf32>, tensor<8x64x2xi32>)
        -> tensor<8x64x4xf32>
    ```
  }];
  let arguments = (ins MoE_F32Scalar:$grad, MoE_F32Tensor:$probs,
                       MoE_I32Tensor:$indices,
                       OptionalAttr<StrArrayAttr>:$batch_axes,
                       OptionalAttr<StrArrayAttr>:$sequence_axes);
  let results = (outs MoE_F32Tensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_ZLossGradOp : MoE_Op<"z_loss_grad", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient of the gate logits of the router z-loss";
  let description = [{
    `dlogits[t, e] = grad * 2 * z[t] * softmax(logits[t])[e] / T`, with
    `z[t] = log sum_e exp logits[t, e]` and `T` the tokens over
    `token_axes`.

    Constraints: `grad` is a 0-d f32 tensor; `logits` is f32 `[..., E]` of
    rank >= 2; the result has its type.

    Example:

    ```mlir
    %dz = moe.z_loss_grad %dl, %logits
        : (tensor<f32>, tensor<8x64x4xf32>) -> tensor<8x64x4xf32>
    ```
  }];
  let arguments = (ins MoE_F32Scalar:$grad, MoE_F32Tensor:$logits,
                       OptionalAttr<StrArrayAttr>:$token_axes);
  let results = (outs MoE_F32Tensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer ops (derived by moe-optimizer)
//===----------------------------------------------------------------------===//

def MoE_GlobalNormOp : MoE_Op<"global_norm", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "L2 norm of all gradients together";
  let description = [{
    `sqrt(sum over every input of sum(x^2))`. After partitioning,
    `input_axes` gives, per input, the mesh axes it is split over: its sum
    of squares is summed over those ranks.

    Constraints: at least one input; `input_axes`, when present, has one
    entry per input.

    Example:

    ```mlir
    %n = moe.global_norm %g0, %g1 : (tensor<64xf32>, tensor<64x64xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<MoE_F32Tensor>:$inputs,
                       OptionalAttr<TypedArrayAttrBase<StrArrayAttr,
                           "mesh axes per input">>:$input_axes);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_ClipCoefficientOp : MoE_Op<"clip_coefficient", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "gradient scale of global-norm clipping";
  let description = [{
    `min(1, max_norm / (norm + 1e-6))`, or 1 when `max_norm` is 0
    (PyTorch `clip_grad_norm_`).

    Constraints: `max_norm >= 0`.

    Example:

    ```mlir
    %c = moe.clip_coefficient %n {max_norm = 1.0 : f32} : tensor<f32>
    ```
  }];
  let arguments = (ins MoE_F32Scalar:$norm, F32Attr:$max_norm);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MoE_LearningRateOp : MoE_Op<"learning_rate", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,Pure]> {
  let summary = "warmup + cosine learning-rate schedule";
  let description = [{
    The learning rate at a 0-based step: linear warmup to `peak` over
    `warmup` steps, then a cosine decay to `min` at `decay_steps`.

    Constraints: `peak >= min >= 0`, `0 <= warmup <= decay_steps`.

    Example:

    ```mlir
    %lr = moe.learning_rate %step {peak = 3.0e-3 : f32, min = 3.0e-4 : f32,
                                   warmup = 20, decay_steps = 300}
        : (tensor<i32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins MoE_I32Scalar:$step, F32Attr:$peak, F32Attr:$min,
                       I64Attr:$warmup, I64Attr:$decay_steps);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_AdamWUpdateOp : MoE_Op<"adamw_update", [
    DeclareOpInterfaceMethods<MoE_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one AdamW update of a parameter and its moments, in place";
  let description = [{
    Updates `param` and its moments `exp_avg`, `exp_avg_sq` (all
    `moe.param` symbols) with the gradient times `grad_scale` (the clipping
    coefficient), at learning rate `lr` and 0-based `step`. Decoupled weight
    decay `lr * weight_decay * p` is applied first. With `working_copy`
    (mixed precision), the updated fp32 `param` is then rounded to nearest
    even into that BF16 copy, which the next step's forward reads.

    ZeRO-1 (after partitioning, `mesh` and `gather_axes`): the gradient and
    the moments (and, with a working copy, the master `param`) are this
    rank's block of dimension 0 split over `gather_axes`, whose ranks hold
    the same whole copy the forward reads (`working_copy`, else `param`).
    The update runs on the block, writes it into the whole copy at the
    rank's rows, and the copy's blocks are all-gathered over `gather_axes`.

    Constraints: the three symbols name `moe.param` ops of the gradient's
    type, `param` a weight and the others two different optimizer states;
    `working_copy`, when present, names a `working_copy` parameter whose
    `master` is `param`; with `gather_axes`, the whole copy's dimension 0 is
    instead the gradient's times the ranks of `gather_axes`, `mesh` names a
    moe.mesh holding each of them once, and the two come together;
    `0 <= beta1, beta2 < 1`, `eps > 0`, `weight_decay >= 0`.

    Example:

    ```mlir
    moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %g, %lr, %c, %step
        {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32,
         weight_decay = 0.1 : f32} : tensor<64x64xf32>
    // ZeRO-1 over dp = 2: @w is tensor<64x64xf32>, its moments 32x64.
    moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %g_block, %lr, %c, %step
        {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32,
         weight_decay = 0.1 : f32, mesh = @mesh, gather_axes = ["dp"]}
        : tensor<32x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$exp_avg,
                       FlatSymbolRefAttr:$exp_avg_sq, MoE_F32Tensor:$grad,
                       MoE_F32Scalar:$lr, MoE_F32Scalar:$grad_scale,
                       MoE_I32Scalar:$step, F32Attr:$beta1, F32Attr:$beta2,
                       F32Attr:$eps, F32Attr:$weight_decay,
                       OptionalAttr<FlatSymbolRefAttr>:$working_copy,
                       OptionalAttr<FlatSymbolRefAttr>:$mesh,
                       OptionalAttr<StrArrayAttr>:$gather_axes);
  let assemblyFormat = [{
    $param `,` $exp_avg `,` $exp_avg_sq `,` $grad `,` $lr `,` $grad_scale `,`
    $step attr-dict `:` type($grad)
  }];
  let hasVerifier = 1;
}

def MoE_Fp8AmaxUpdateOp : MoE_Op<"fp8_amax_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "ends the step of an FP8 amax history, in place";
  let description = [{
    The amax history `history` (a `moe.param` of kind `fp8_history`,
    `[E, 9, L]`: per expert and GEMM input, this step's amax at `[0]` and
    the last `L - 1` steps' after it, newest first) moves one step on: this
    step's amax becomes the newest past one, the oldest drops out, and `[0]`
    starts again from zero. After partitioning, `axes` names the mesh axes
    over which ranks hold copies of the same block of the history: this
    step's amax is first the maximum over them, so the copies, and the
    scales the next step reads from them, stay the same on every rank.

    Constraints: `history` names a `moe.param` of kind `fp8_history`;
    `mesh` and `axes` come together, `mesh` names a moe.mesh with all of
    `axes`, each at most once.

    Example:

    ```mlir
    moe.fp8_amax_update @"model.layers.0.block_sparse_moe.experts.fp8_amax_history"
        {mesh = @mesh, axes = ["dp"]}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$history,
                       OptionalAttr<FlatSymbolRefAttr>:$mesh,
                       OptionalAttr<StrArrayAttr>:$axes);
  let assemblyFormat = "$history attr-dict";
}

#endif // MOE_DIALECT_MOE_IR_MOEOPS_TD
