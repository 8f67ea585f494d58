// A mid-sized model (161 MiB per rank) whose memory is mostly the arena:
// test/moe-run/remat.test sets what a run measures against the plan.
module {
  moe.transformer @mid {vocab = 4096, hidden = 256, layers = 2, heads = 4,
                        kv_heads = 2, experts = 4, top_k = 2, ffn = 512,
                        seq = 256, batch = 8, aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 1.0e-3 : f32, min_lr = 1.0e-4 : f32, warmup = 5,
                    decay_steps = 100, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
