// DeepSeek-V3's router: sigmoid scores, the top-2 among the experts of the
// better of two groups of four (n_group, topk_group), the selected scores
// renormalised and scaled by routed_scaling_factor. The load-balancing loss
// does not apply to this selection (aux_coef = 0). A dense first layer.
module {
  moe.transformer @sigmoid_router {vocab = 256, hidden = 32, layers = 2,
                                   heads = 4, kv_heads = 2, experts = 8,
                                   top_k = 2, ffn = 16, seq = 16, batch = 4,
                                   dense_layers = array<i64: 0>,
                                   scoring = #moe.scoring<sigmoid>,
                                   routed_scaling_factor = 2.5 : f32,
                                   n_group = 2, topk_group = 1,
                                   aux_coef = 0.0 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
