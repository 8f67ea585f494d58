// The seed configuration: Mixtral-8x7B's shape (32 layers, hidden 4096,
// 32 query / 8 key-value heads, 8 experts of width 14336, top-2, vocabulary
// 32000), trained on 4096-token sequences. 46.7B parameters, 12.9B active.
module {
  moe.transformer @mixtral_8x7b {vocab = 32000, hidden = 4096, layers = 32,
                                 heads = 32, kv_heads = 8, experts = 8,
                                 top_k = 2, ffn = 14336, seq = 4096, batch = 8,
                                 rope_theta = 1.0e6 : f32, aux_coef = 0.02 : f32}
  moe.adamw_config {lr = 3.0e-4 : f32, min_lr = 3.0e-5 : f32, warmup = 2000,
                    decay_steps = 250000, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
