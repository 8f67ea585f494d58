// A learning rate of 100: after the first update the weights are about
// 100 each, and the loss is in the tens of thousands, finite but absurd.
module {
  moe.transformer @explode {vocab = 256, hidden = 16, layers = 1, heads = 2,
                            kv_heads = 2, experts = 2, top_k = 1, ffn = 16,
                            seq = 8, batch = 2}
  moe.adamw_config {lr = 100.0 : f32, warmup = 0, decay_steps = 100,
                    max_grad_norm = 0.0 : f32}
}
