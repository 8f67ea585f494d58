// Qwen3-MoE's router with norm_topk_prob = false: softmax scores, the top-3
// of 6 experts weighted by their probabilities as they are, with the
// load-balancing loss.
module {
  moe.transformer @unnormalised_router {vocab = 256, hidden = 32, layers = 2,
                                        heads = 4, kv_heads = 2, experts = 6,
                                        top_k = 3, ffn = 16, seq = 16,
                                        batch = 4, norm_topk_prob = false,
                                        aux_coef = 0.02 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
