// Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B config.json; Megatron-Bridge qwen_provider.py
// Qwen3MoEModelProvider235B_A22B), as models/qwen3-moe-235b.mlir: 94 MoE layers of 128 experts, top-8,
// moe_intermediate_size 1536, GQA with 64 query and 4 key/value heads of head_dim 128, QK-norm, renormalised
// top-k weights, aux loss 0.001, rope_theta 1e6, rms_norm_eps 1e-6, untied embeddings. Sequences of 4096
// tokens, as Megatron-Bridge's performance summary ran it (its runs force-balance the routing).
module {
  moe.transformer @qwen3_235b_a22b {family = "qwen3_moe", vocab = 151936,
      hidden = 4096, layers = 94, heads = 64, kv_heads = 4, head_dim = 128,
      qk_norm = true, experts = 128, top_k = 8, ffn = 1536, norm_topk_prob = true,
      aux_coef = 0.001 : f32, rms_eps = 1.0e-6 : f32, rope_theta = 1.0e6 : f32,
      seq = 4096, batch = 1, precision = #moe.precision<bf16>}
}
