// DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json; Megatron-Bridge deepseek_provider.py DeepSeekV3ModelProvider),
// as models/deepseek-v3-671b.mlir: 61 layers, the first 3 dense (18432), the others 256 routed experts of 2048,
// top-8 among the best 4 of 8 groups by sigmoid scores, routed_scaling_factor 2.5, one shared expert; multi-head
// latent attention with 128 heads (q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128),
// untied embeddings. Without the multi-token-prediction module (moe.transformer has none). Sequences of 4096
// tokens, as Megatron-Bridge's 25.09 performance summary ran it.
module {
  moe.transformer @deepseek_v3 {family = "deepseek_v3", vocab = 129280,
      hidden = 7168, layers = 61, heads = 128, kv_heads = 128, q_lora_rank = 1536,
      kv_lora_rank = 512, qk_nope_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128,
      dense_layers = array<i64: 0, 1, 2>, dense_ffn = 18432, experts = 256,
      top_k = 8, ffn = 2048, shared_experts = 1, scoring = #moe.scoring<sigmoid>,
      n_group = 8, topk_group = 4, norm_topk_prob = true,
      routed_scaling_factor = 2.5 : f32, bias_update_rate = 1.0e-3 : f32,
      seq_aux_coef = 1.0e-4 : f32, aux_coef = 0.0 : f32, rms_eps = 1.0e-6 : f32,
      rope_theta = 1.0e4 : f32, seq = 4096, batch = 1, precision = #moe.precision<bf16>}
}
