// A 1.1T-parameter configuration: 86 layers, hidden 8192, 64 query / 8
// key-value heads, 64 experts of width 8192 with top-2 routing, the first
// layer dense (DeepSeek-style). 1.109e12 parameters, 4.85e10 active per
// token. It compiles on one rank for inspection; training it needs the
// sharding of the parallelism passes.
module {
  moe.transformer @moe_1t {vocab = 32000, hidden = 8192, layers = 86,
                           heads = 64, kv_heads = 8, experts = 64, top_k = 2,
                           ffn = 8192, seq = 4096, batch = 1,
                           dense_layers = array<i64: 0>, dense_ffn = 28672,
                           rope_theta = 5.0e5 : f32, aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 1.5e-4 : f32, min_lr = 1.5e-5 : f32, warmup = 2000,
                    decay_steps = 500000, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
