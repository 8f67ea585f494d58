// RUN: moe-opt %s --split-input-file --moe-expand-transformer --verify-diagnostics | FileCheck %s

// A dense first layer and a MoE second layer, HF Mixtral names.
// CHECK: module attributes {moe.model = {{{.*}}dense_ffn = 6 : i64, dense_layers = array<i64: 0>, document_mask = false, eos_token_id = -1 : i64, experts = 4 : i64{{.*}}name = "small"
// CHECK: moe.param @model.embed_tokens.weight : tensor<16x8xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
// CHECK: moe.param @model.layers.0.input_layernorm.weight : tensor<8xf32> {init = #moe.init<ones>, no_weight_decay}
// CHECK: moe.param @model.layers.0.self_attn.q_proj.weight : tensor<8x8xf32>
// CHECK: moe.param @model.layers.0.self_attn.k_proj.weight : tensor<4x8xf32>
// CHECK: moe.param @model.layers.0.mlp.gate_proj.weight : tensor<6x8xf32>
// CHECK: moe.param @model.layers.0.mlp.down_proj.weight : tensor<8x6xf32>
// CHECK: moe.param @model.layers.1.block_sparse_moe.gate.weight : tensor<4x8xf32>
// CHECK: moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x4x8xf32>
// CHECK: moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight" : tensor<4x8x4xf32>
// CHECK: moe.param @model.norm.weight : tensor<8xf32>
// CHECK: moe.param @lm_head.weight : tensor<16x8xf32>
// CHECK-NOT: moe.transformer
// CHECK-LABEL: func.func @forward(%{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>) -> tensor<f32>
// CHECK: moe.embedding
// CHECK: moe.rms_norm
// CHECK-COUNT-3: moe.linear
// CHECK: moe.rope %{{.*}} {num_heads = 2 : i64
// CHECK: moe.rope %{{.*}} {num_heads = 1 : i64
// CHECK: moe.attention {{.*}} {num_heads = 2 : i64, num_kv_heads = 1 : i64}
// CHECK: moe.swiglu
// CHECK: moe.router %{{.*}} {capacity_factor = 1.250000e+00 : f32, top_k = 2 : i64}
// CHECK: moe.experts
// CHECK: moe.aux_loss %{{.*}} {top_k = 2 : i64}
// CHECK: %[[CE:.*]] = moe.cross_entropy
// CHECK: %[[LOSS:.*]] = moe.weighted_sum %[[CE]], %{{.*}} {coefficients = array<f32: 1.000000e+00, 0.00999999977>}
// CHECK: return %[[LOSS]] : tensor<f32>
moe.transformer @small {vocab = 16, hidden = 8, layers = 2, heads = 2,
                        kv_heads = 1, experts = 4, top_k = 2, ffn = 4, seq = 4,
                        batch = 2, dense_layers = array<i64: 0>, dense_ffn = 6,
                        capacity_factor = 1.25 : f32}

// -----

// Three MoE layers share the aux coefficient: each term gets coef / 3.
// CHECK-LABEL: func.func @forward
// CHECK-COUNT-3: moe.aux_loss
// CHECK: moe.weighted_sum {{.*}} {coefficients = array<f32: 1.000000e+00, 0.0333333351, 0.0333333351, 0.0333333351>}
moe.transformer @moe3 {vocab = 16, hidden = 8, layers = 3, heads = 2,
                       kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4,
                       batch = 1, aux_coef = 0.1 : f32}

// -----

moe.transformer @a {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}
// expected-error @+1 {{expected one moe.transformer per module}}
moe.transformer @b {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

func.func private @forward()
// expected-error @+1 {{cannot expand: the module already has a symbol named 'forward'}}
moe.transformer @c {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// DeepSeek's shared experts: one always-active MLP of width
// shared_experts * ffn per MoE layer, added to the routed experts' output
// before the residual add.
// CHECK: moe.model = {{{.*}}shared_experts = 2 : i64
// CHECK: moe.param @model.layers.0.block_sparse_moe.shared_experts.gate_proj.weight : tensor<8x8xf32>
// CHECK: moe.param @model.layers.0.block_sparse_moe.shared_experts.up_proj.weight : tensor<8x8xf32>
// CHECK: moe.param @model.layers.0.block_sparse_moe.shared_experts.down_proj.weight : tensor<8x8xf32>
// CHECK: %[[ROUTED:.*]] = moe.experts
// CHECK: %[[GATE:.*]] = moe.linear %[[NORMED:[^,]*]], %{{.*}} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
// CHECK: %[[UP:.*]] = moe.linear %[[NORMED]], %{{.*}} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
// CHECK: %[[ACT:.*]] = moe.swiglu %[[GATE]], %[[UP]]
// CHECK: %[[SHARED:.*]] = moe.linear %[[ACT]]
// CHECK: %[[FFN:.*]] = moe.add %[[ROUTED]], %[[SHARED]]
// CHECK: moe.add %{{.*}}, %[[FFN]]
moe.transformer @shared {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, shared_experts = 2}

// -----

// Qwen3's head_dim, independent of hidden / heads: q and o are 12 wide over
// 2 heads of 6 (hidden 8 is not a multiple of anything that matters here).
// CHECK: moe.model = {{{.*}}head_dim = 6 : i64
// CHECK: moe.param @model.layers.0.self_attn.q_proj.weight : tensor<12x8xf32>
// CHECK: moe.param @model.layers.0.self_attn.k_proj.weight : tensor<6x8xf32>
// CHECK: moe.param @model.layers.0.self_attn.o_proj.weight : tensor<8x12xf32>
// CHECK: moe.attention {{.*}} -> (tensor<1x4x12xf32>, tensor<1x2x4xf32>)
moe.transformer @wide {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, head_dim = 6, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// DeepSeek-V3's router: the transformer's HF-named settings become the
// router's; without the load-balancing loss (it recounts the top-k of the
// scores), the loss is the cross-entropy alone.
// CHECK: moe.model = {{{.*}}n_group = 4 : i64, name = "ds", norm_topk_prob = true, {{.*}}routed_scaling_factor = 2.500000e+00 : f32, scoring = "sigmoid", {{.*}}topk_group = 2 : i64
// CHECK: moe.router %{{.*}} {groups = 4 : i64, scale = 2.500000e+00 : f32, scoring = #moe.scoring<sigmoid>, top_groups = 2 : i64, top_k = 3 : i64}
// CHECK-NOT: moe.aux_loss
// CHECK: moe.weighted_sum %{{[^,]*}} {coefficients = array<f32: 1.000000e+00>}
moe.transformer @ds {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 8, top_k = 3, ffn = 4, seq = 4, batch = 1, scoring = #moe.scoring<sigmoid>, routed_scaling_factor = 2.5 : f32, n_group = 4, topk_group = 2, aux_coef = 0.0 : f32}

// -----

// Qwen3-MoE's norm_topk_prob = false keeps the load-balancing loss.
// CHECK: moe.model = {{{.*}}name = "qwen", norm_topk_prob = false
// CHECK: %[[P:.*]], %{{.*}}, %{{.*}} = moe.router %{{.*}} {normalize = false, top_k = 2 : i64}
// CHECK: moe.aux_loss %[[P]]
moe.transformer @qwen {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 2, ffn = 4, seq = 4, batch = 1, norm_topk_prob = false}

// -----

// Auxiliary-loss-free balancing: the router selects with a bias it does
// not differentiate, and counts its load for the step's end.
// CHECK: moe.param @model.layers.0.block_sparse_moe.gate.e_score_correction_bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>, no_weight_decay}
// CHECK: moe.param @model.layers.0.block_sparse_moe.gate.tokens_per_expert : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>, no_weight_decay}
// CHECK: %[[BIAS:.*]] = moe.get_param @model.layers.0.block_sparse_moe.gate.e_score_correction_bias
// CHECK: %{{.*}}, %{{.*}}, %[[IDS:.*]] = moe.router %{{.*}} bias %[[BIAS]] {scoring = #moe.scoring<sigmoid>, top_k = 2 : i64}
// CHECK: moe.expert_load %[[IDS]] {bias = @model.layers.0.block_sparse_moe.gate.e_score_correction_bias, bias_update_rate = 1.000000e-03 : f32, load = @model.layers.0.block_sparse_moe.gate.tokens_per_expert}
// CHECK-NOT: moe.aux_loss
moe.transformer @balanced {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 2, ffn = 4, seq = 4, batch = 1, scoring = #moe.scoring<sigmoid>, bias_update_rate = 1.0e-3 : f32, aux_coef = 0.0 : f32}

// -----

// Qwen3's QK-norm: each head's query and key normalised, before RoPE, by a
// weight of head_dim (not decayed, as the other norms).
// CHECK: moe.param @model.layers.0.self_attn.q_norm.weight : tensor<6xf32> {init = #moe.init<ones>, no_weight_decay}
// CHECK: moe.param @model.layers.0.self_attn.k_norm.weight : tensor<6xf32> {init = #moe.init<ones>, no_weight_decay}
// CHECK: %[[Q:.*]] = moe.linear
// CHECK: %[[K:.*]] = moe.linear
// CHECK: %[[QN:.*]] = moe.rms_norm %[[Q]], %{{.*}} {epsilon = {{.*}}, num_heads = 2 : i64} : (tensor<1x4x12xf32>, tensor<6xf32>)
// CHECK: %[[KN:.*]] = moe.rms_norm %[[K]], %{{.*}} {epsilon = {{.*}}, num_heads = 1 : i64} : (tensor<1x4x6xf32>, tensor<6xf32>)
// CHECK: moe.rope %[[QN]]
// CHECK: moe.rope %[[KN]]
moe.transformer @qwen3 {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, head_dim = 6, qk_norm = true, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// DeepSeek-V3's and Qwen3-MoE's HF names: the MoE layer is "mlp", its
// experts' projections gate_proj, up_proj and down_proj.
// CHECK: moe.param @model.layers.0.mlp.gate.weight : tensor<2x8xf32>
// CHECK: moe.param @"model.layers.0.mlp.experts.{e}.gate_proj.weight" : tensor<2x4x8xf32>
// CHECK: moe.param @"model.layers.0.mlp.experts.{e}.up_proj.weight" : tensor<2x4x8xf32>
// CHECK: moe.param @"model.layers.0.mlp.experts.{e}.down_proj.weight" : tensor<2x8x4xf32>
// CHECK: moe.param @model.layers.0.mlp.shared_experts.gate_proj.weight : tensor<4x8xf32>
moe.transformer @deepseek {family = "deepseek_v3", vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, shared_experts = 1, seq = 4, batch = 1}

// -----

// Tied embeddings: the head reads the embedding table; no lm_head.weight.
// CHECK: moe.param @model.embed_tokens.weight
// CHECK-NOT: lm_head.weight
// CHECK: moe.get_param @model.embed_tokens.weight
// CHECK: %[[TABLE:.*]] = moe.get_param @model.embed_tokens.weight
// CHECK: moe.linear %{{.*}}, %[[TABLE]] : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
moe.transformer @tied {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, tie_word_embeddings = true}

// -----

// DeepSeek-V3's sequence-wise balance loss, on the router's own selection,
// and the router z-loss, on the gate logits: each MoE layer's, summed over
// the layers with their coefficients, after the cross-entropy.
// CHECK: %[[GATE0:.*]] = moe.get_param @model.layers.0.block_sparse_moe.gate.weight
// CHECK: %[[LOGITS0:.*]] = moe.linear %{{.*}}, %[[GATE0]]
// CHECK: %[[P0:.*]], %{{.*}}, %[[I0:.*]] = moe.router %[[LOGITS0]]
// CHECK: %[[SEQ0:.*]] = moe.sequence_aux_loss %[[P0]], %[[I0]] : (tensor<2x4x4xf32>, tensor<2x4x2xi32>) -> tensor<f32>
// CHECK: %[[Z0:.*]] = moe.z_loss %[[LOGITS0]] : (tensor<2x4x4xf32>) -> tensor<f32>
// CHECK: %[[SEQ1:.*]] = moe.sequence_aux_loss
// CHECK: %[[Z1:.*]] = moe.z_loss
// CHECK: %[[CE:.*]] = moe.cross_entropy
// CHECK: moe.weighted_sum %[[CE]], %[[SEQ0]], %[[SEQ1]], %[[Z0]], %[[Z1]] {coefficients = array<f32: 1.000000e+00, 1.000000e-03, 1.000000e-03, 2.000000e-03, 2.000000e-03>}
moe.transformer @router_losses {vocab = 16, hidden = 8, layers = 2, heads = 2, kv_heads = 1, experts = 4, top_k = 2, ffn = 4, seq = 4, batch = 2, scoring = #moe.scoring<sigmoid>, aux_coef = 0.0 : f32, seq_aux_coef = 1.0e-3 : f32, z_loss_coef = 2.0e-3 : f32}

// -----

// DeepSeek's multi-head latent attention: a query bottleneck, one
// compressed key/value vector and one RoPE key that every head shares.
// CHECK: moe.param @model.layers.0.self_attn.q_a_proj.weight : tensor<6x8xf32>
// CHECK: moe.param @model.layers.0.self_attn.q_a_layernorm.weight : tensor<6xf32>
// CHECK: moe.param @model.layers.0.self_attn.q_b_proj.weight : tensor<12x6xf32>
// CHECK: moe.param @model.layers.0.self_attn.kv_a_proj_with_mqa.weight : tensor<6x8xf32>
// CHECK: moe.param @model.layers.0.self_attn.kv_a_layernorm.weight : tensor<4xf32>
// CHECK: moe.param @model.layers.0.self_attn.kv_b_proj.weight : tensor<14x4xf32>
// CHECK: moe.param @model.layers.0.self_attn.o_proj.weight : tensor<8x6xf32>
// CHECK: %[[Q:.*]] = moe.linear %{{.*}}, %{{.*}} : (tensor<1x4x6xf32>, tensor<12x6xf32>) -> tensor<1x4x12xf32>
// CHECK: %[[QNOPE:.*]], %[[QROPE:.*]] = moe.split_heads %[[Q]] {num_heads = 2 : i64} : (tensor<1x4x12xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x4xf32>)
// CHECK: %[[KVA:.*]] = moe.linear %{{.*}}, %{{.*}} : (tensor<1x4x8xf32>, tensor<6x8xf32>) -> tensor<1x4x6xf32>
// CHECK: %[[CKV:.*]], %[[KROPE:.*]] = moe.split_heads %[[KVA]] {num_heads = 1 : i64} : (tensor<1x4x6xf32>) -> (tensor<1x4x4xf32>, tensor<1x4x2xf32>)
// CHECK: %[[KNOPE:.*]], %[[V:.*]] = moe.split_heads %{{.*}} {num_heads = 2 : i64} : (tensor<1x4x14xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x6xf32>)
// CHECK: %[[QR:.*]] = moe.rope %[[QROPE]] {num_heads = 2 : i64
// CHECK: %[[KR:.*]] = moe.rope %[[KROPE]] {num_heads = 1 : i64
// CHECK: %[[QUERY:.*]] = moe.concat_heads %[[QNOPE]], %[[QR]] {num_heads = 2 : i64} : (tensor<1x4x8xf32>, tensor<1x4x4xf32>) -> tensor<1x4x12xf32>
// CHECK: %[[KEY:.*]] = moe.concat_heads %[[KNOPE]], %[[KR]] {num_heads = 2 : i64} : (tensor<1x4x8xf32>, tensor<1x4x2xf32>) -> tensor<1x4x12xf32>
// CHECK: moe.attention %[[QUERY]], %[[KEY]], %[[V]] {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<1x4x12xf32>, tensor<1x4x12xf32>, tensor<1x4x6xf32>) -> (tensor<1x4x6xf32>, tensor<1x2x4xf32>)
moe.transformer @mla {family = "deepseek_v3", vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, q_lora_rank = 6, kv_lora_rank = 4, qk_rope_head_dim = 2, qk_nope_head_dim = 4, v_head_dim = 3}

// -----

// Scaled RoPE (YaRN) reaches every RoPE, and DeepSeek's softmax-scale
// correction every attention, of multi-head latent attention.
// CHECK: name = "mla_yarn"
// CHECK: moe.rope %{{.*}} {num_heads = 2 : i64, scaling = #moe.rope_scaling<yarn, factor = 4.000000e+00, original_max_position_embeddings = 8, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00, truncate = true, attention_factor = 1.000000e+00>, theta = 1.000000e+04 : f32}
// CHECK: moe.rope %{{.*}} {num_heads = 1 : i64, scaling = #moe.rope_scaling<yarn
// CHECK: moe.attention {{.*}} {num_heads = 2 : i64, num_kv_heads = 2 : i64, scale_factor = 1.295400e+00 : f32}
moe.transformer @mla_yarn {family = "deepseek_v3", vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, q_lora_rank = 6, kv_lora_rank = 4, qk_rope_head_dim = 2, qk_nope_head_dim = 4, v_head_dim = 3, rope_scaling = #moe.rope_scaling<yarn, factor = 4.0, original_max_position_embeddings = 8, beta_fast = 32.0, beta_slow = 1.0, truncate = true, attention_factor = 1.0>, softmax_scale_factor = 1.2954 : f32}

// -----

// Without a softmax_scale_factor the attention has no scale_factor; Llama
// 3's scaling reaches the query's and the key's RoPE.
// CHECK: name = "llama3"
// CHECK: moe.rope %{{.*}} {num_heads = 2 : i64, scaling = #moe.rope_scaling<llama3, factor = 8.000000e+00, original_max_position_embeddings = 2, low_freq_factor = 1.000000e+00, high_freq_factor = 4.000000e+00>, theta = 1.000000e+04 : f32}
// CHECK: moe.rope %{{.*}} {num_heads = 1 : i64, scaling = #moe.rope_scaling<llama3
// CHECK: moe.attention {{.*}} {num_heads = 2 : i64, num_kv_heads = 1 : i64} :
moe.transformer @llama3 {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<llama3, factor = 8.0, original_max_position_embeddings = 2, low_freq_factor = 1.0, high_freq_factor = 4.0>}
