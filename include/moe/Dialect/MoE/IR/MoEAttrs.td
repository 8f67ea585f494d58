//===- MoEAttrs.td - attributes of the moe dialect ---------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEATTRS_TD
#define MOE_DIALECT_MOE_IR_MOEATTRS_TD

include "moe/Dialect/MoE/IR/MoEBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def MoE_ShardingAttr : AttrDef<MoE_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "how a tensor is split over the axes of a device mesh";
  let description = [{
    One entry per tensor dimension: the mesh axes that dimension is split
    over, major to minor (`{}`: not split). A dimension of size `n` split
    over axes of sizes `a, b` holds `n / (a * b)` elements per rank; rank
    coordinates on the axes pick the block, the first axis outermost. Axes
    the sharding does not name hold replicas.

    Constraints:
    * every axis is one of the mesh axes moec implements (`dp`, `fsdp`,
      `ep`, `tp`) and appears at most once overall;
    * where it is used (`moe.shard`, `moe.param`), the sharding names an
      existing `moe.mesh`, one entry per dimension of the tensor, axes of
      that mesh, and each dimension is divisible by the product of its axes'
      sizes.

    Example: the batch of a `[8, 64, 64]` activation split over `dp` and
    `ep`, its features over `tp`:

    ```mlir
    #moe.sharding<@mesh, [{dp, ep}, {}, {tp} ]>
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$mesh,
                        "::mlir::ArrayAttr":$dims);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axes of dimension `dim`.
    ::llvm::SmallVector<::llvm::StringRef> axesOf(unsigned dim) const;
    /// The sharding of a tensor of `rank` dimensions split over nothing.
    static ShardingAttr getReplicated(::mlir::FlatSymbolRefAttr mesh,
                                      unsigned rank);
    /// Builds a sharding from per-dimension axis names.
    static ShardingAttr get(::mlir::FlatSymbolRefAttr mesh,
        ::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>> dims);
    /// Whether no dimension is split.
    bool isReplicated() const;
  }];
  let skipDefaultBuilders = 0;
}

def MoE_RopeScalingAttr : AttrDef<MoE_Dialect, "RopeScaling"> {
  let mnemonic = "rope_scaling";
  let summary = "scaled RoPE: how its frequencies are stretched";
  let description = [{
    RoPE for a longer context than the model was pretrained on, as HF's
    `rope_type` (transformers' `modeling_rope_utils`). Pair `i` of a head of
    width `d` rotates by `p * f_i` at position `p`, with the unscaled
    `u_i = theta^(-2i/d)` and `f_i = u_i * (k_i + (1 - k_i) / factor)`, where
    `k_i` (the share of `u_i` kept) is:

    * `linear`: 0 (every frequency divided by `factor`);
    * `yarn`: `1 - clamp((i - lo) / (hi - lo), 0, 1)`, the ramp between the
      pairs `lo` and `hi` that turn `beta_fast` and `beta_slow` times over
      `original_max_position_embeddings` positions (`d * ln(L / (2 pi b)) /
      (2 ln theta)`, floored and ceiled with `truncate`, clamped to `[0, d -
      1]`);
    * `llama3`: `clamp((L / w_i - low_freq_factor) / (high_freq_factor -
      low_freq_factor), 0, 1)` with the wavelength `w_i = 2 pi / u_i` and `L
      = original_max_position_embeddings`.

    cos and sin are multiplied by `attention_factor` (YaRN's; 1 for the
    others), so the product of a rotated query and key is multiplied by its
    square. HF's `dynamic` NTK scaling has no attribute: in a training step
    no longer than the pretraining context it is unscaled RoPE, and
    moe-import refuses a longer one.

    Each kind takes exactly its parameters: `linear` `factor`; `yarn`
    `factor`, `original_max_position_embeddings`, `beta_fast`, `beta_slow`,
    `truncate` and `attention_factor`; `llama3` `factor`,
    `original_max_position_embeddings`, `low_freq_factor` and
    `high_freq_factor`.

    Constraints:
    * every parameter is finite; `factor >= 1`; `attention_factor > 0`;
    * `original_max_position_embeddings >= 1` (yarn, llama3);
    * `0 < beta_slow <= beta_fast` (yarn);
    * `0 < low_freq_factor < high_freq_factor` (llama3).

    Example (DeepSeek-V3's, with its attention factor resolved):

    ```mlir
    #moe.rope_scaling<yarn, factor = 40.0,
        original_max_position_embeddings = 4096, beta_fast = 32.0,
        beta_slow = 1.0, truncate = true, attention_factor = 1.0>
    ```
  }];
  let parameters = (ins "::mlir::moe::RopeScalingKind":$kind,
                        APFloatParameter<"">:$factor,
                        "int64_t":$originalMaxPositionEmbeddings,
                        APFloatParameter<"">:$betaFast,
                        APFloatParameter<"">:$betaSlow,
                        "bool":$truncate,
                        APFloatParameter<"">:$lowFreqFactor,
                        APFloatParameter<"">:$highFreqFactor,
                        APFloatParameter<"">:$attentionFactor);
  let builders = [
    // The parameters as doubles (held as IEEE double APFloats).
    AttrBuilder<(ins "::mlir::moe::RopeScalingKind":$kind, "double":$factor,
                     "int64_t":$originalMaxPositionEmbeddings,
                     "double":$betaFast, "double":$betaSlow, "bool":$truncate,
                     "double":$lowFreqFactor, "double":$highFreqFactor,
                     "double":$attentionFactor), [{
      return $_get($_ctxt, kind, ::llvm::APFloat(factor),
                   originalMaxPositionEmbeddings, ::llvm::APFloat(betaFast),
                   ::llvm::APFloat(betaSlow), truncate,
                   ::llvm::APFloat(lowFreqFactor),
                   ::llvm::APFloat(highFreqFactor),
                   ::llvm::APFloat(attentionFactor));
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_TD
