// Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json; Megatron-Bridge qwen_provider.py Qwen3MoEModelProvider30B_A3B):
// 48 MoE layers of 128 experts, top-8, moe_intermediate_size 768, GQA with 32 query and 4 key/value heads of
// head_dim 128 (q is 4096 wide, twice hidden), QK-norm, renormalised top-k weights, router aux loss 0.001,
// rope_theta 1e6, rms_norm_eps 1e-6, untied embeddings. Sequences of 4096 tokens, as Megatron-Bridge's
// performance summary ran it (its runs force-balance the routing).
module {
  moe.transformer @qwen3_30b_a3b {family = "qwen3_moe", vocab = 151936,
      hidden = 2048, layers = 48, heads = 32, kv_heads = 4, head_dim = 128,
      qk_norm = true, experts = 128, top_k = 8, ffn = 768, norm_topk_prob = true,
      aux_coef = 0.001 : f32, rms_eps = 1.0e-6 : f32, rope_theta = 1.0e6 : f32,
      seq = 4096, batch = 1, precision = #moe.precision<bf16>}
}
