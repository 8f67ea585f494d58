// One key/value head (multi-query), a wide dense first layer, top-3 of 6
// experts, a larger RoPE base, no clipping.
module {
  moe.transformer @mqa {vocab = 160, hidden = 48, layers = 2, heads = 6,
                        kv_heads = 1, experts = 6, top_k = 3, ffn = 20,
                        seq = 12, batch = 3, dense_layers = array<i64: 0>,
                        dense_ffn = 80, rope_theta = 5.0e5 : f32,
                        rms_eps = 1.0e-6 : f32, aux_coef = 0.02 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 4,
                    beta1 = 0.8 : f32, beta2 = 0.99 : f32, eps = 1.0e-6 : f32,
                    max_grad_norm = 0.0 : f32}
}
