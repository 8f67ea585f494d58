// Six small layers (eight pipeline units), enough to cut into 4 stages x 2
// virtual stages for interleaved schedules; MoE from layer 1 on.
module {
  moe.transformer @deep {vocab = 256, hidden = 32, layers = 6, heads = 2,
                         kv_heads = 1, experts = 4, top_k = 2, ffn = 64,
                         seq = 32, batch = 8, dense_layers = array<i64: 0>,
                         aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 3.0e-3 : f32, min_lr = 3.0e-4 : f32, warmup = 20,
                    decay_steps = 300, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
