// The tiny model with a capacity factor of 1: the busiest experts drop
// slots (indices -1), whose saved up projections are zeros.
module {
  moe.transformer @tiny_capacity {vocab = 256, hidden = 64, layers = 2,
                                  heads = 4, kv_heads = 2, experts = 4,
                                  top_k = 2, ffn = 128, seq = 64, batch = 8,
                                  dense_layers = array<i64: 0>,
                                  aux_coef = 0.01 : f32,
                                  capacity_factor = 1.0 : f32}
  moe.adamw_config {lr = 3.0e-3 : f32, min_lr = 3.0e-4 : f32, warmup = 20,
                    decay_steps = 300, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
