// DeepSeek-V3's multi-head latent attention: queries through a rank-24
// bottleneck (q_a_proj, q_a_layernorm, q_b_proj), keys and values from a
// rank-16 compressed vector (kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj), each head's 8 features without position and 4 rotated ones
// (one RoPE key for all heads), values of 6 per head.
module {
  moe.transformer @mla {family = "deepseek_v3", vocab = 256, hidden = 32,
                        layers = 2, heads = 4, kv_heads = 4, experts = 4,
                        top_k = 2, ffn = 16, seq = 16, batch = 4,
                        dense_layers = array<i64: 0>, q_lora_rank = 24,
                        kv_lora_rank = 16, qk_rope_head_dim = 4,
                        qk_nope_head_dim = 8, v_head_dim = 6}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
