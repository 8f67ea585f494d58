// Top-1 routing with a capacity factor that drops tokens, full multi-head
// attention, three MoE layers.
module {
  moe.transformer @capacity {vocab = 128, hidden = 32, layers = 3, heads = 4,
                             kv_heads = 4, experts = 8, top_k = 1, ffn = 48,
                             seq = 16, batch = 4, capacity_factor = 1.0 : f32,
                             aux_coef = 0.05 : f32}
  moe.adamw_config {lr = 1.0e-2 : f32, min_lr = 1.0e-3 : f32, warmup = 2,
                    decay_steps = 10, weight_decay = 0.05 : f32,
                    max_grad_norm = 0.5 : f32}
}
