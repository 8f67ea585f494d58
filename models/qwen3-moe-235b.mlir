// Qwen3-235B-A22B (HF Qwen3MoeForCausalLM, Qwen/Qwen3-235B-A22B config.json):
// 94 MoE layers of 128 experts, top-8, moe_intermediate_size 1536, GQA with
// 64 query and 4 key/value heads of head_dim 128 (q is 8192 wide, twice
// hidden), QK-norm, renormalised top-k weights (norm_topk_prob), router
// aux loss coefficient 0.001, rope_theta 1e6, rms_norm_eps 1e-6, untied
// embeddings. 235.09B parameters, 22.19B active per token. A step of 1024
// sequences of 4096 tokens (4M tokens), as its pretraining stage 1 used.
module {
  moe.transformer @qwen3_moe_235b {family = "qwen3_moe", vocab = 151936,
                                   hidden = 4096, layers = 94, heads = 64,
                                   kv_heads = 4, head_dim = 128,
                                   qk_norm = true, experts = 128, top_k = 8,
                                   ffn = 1536, norm_topk_prob = true,
                                   aux_coef = 0.001 : f32,
                                   rms_eps = 1.0e-6 : f32,
                                   rope_theta = 1.0e6 : f32, seq = 4096,
                                   batch = 1024, precision = #moe.precision<bf16>}
}
