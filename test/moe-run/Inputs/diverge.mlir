// An absurd learning rate: the weights blow up within a few steps.
module {
  moe.transformer @diverge {vocab = 256, hidden = 16, layers = 1, heads = 2,
                            kv_heads = 2, experts = 2, top_k = 1, ffn = 16,
                            seq = 8, batch = 2}
  moe.adamw_config {lr = 1.0e30 : f32, warmup = 0, decay_steps = 100,
                    max_grad_norm = 0.0 : f32}
}
