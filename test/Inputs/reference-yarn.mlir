// reference-mla.mlir with DeepSeek-V3's scaled RoPE: YaRN over a
// pretraining context of 4 positions (shorter than seq), an attention
// factor that is not 1, and the softmax-scale correction of
// mscale_all_dim = 1 at factor 4, (0.1 ln 4 + 1)^2.
module {
  moe.transformer @mla_yarn {family = "deepseek_v3", vocab = 256, hidden = 32,
                             layers = 2, heads = 4, kv_heads = 4, experts = 4,
                             top_k = 2, ffn = 16, seq = 16, batch = 4,
                             dense_layers = array<i64: 0>, q_lora_rank = 24,
                             kv_lora_rank = 16, qk_rope_head_dim = 4,
                             qk_nope_head_dim = 8, v_head_dim = 6,
                             rope_scaling = #moe.rope_scaling<yarn, factor = 4.0, original_max_position_embeddings = 4, beta_fast = 32.0, beta_slow = 1.0, truncate = true, attention_factor = 0.96>,
                             softmax_scale_factor = 1.2954 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
