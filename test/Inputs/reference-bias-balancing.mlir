// DeepSeek-V3 (its HF names: mlp.gate, mlp.experts.{e}.gate_proj, ...) with
// its auxiliary-loss-free balancing on its router: each MoE
// layer's selection bias moves by bias_update_rate times the sign of its
// expert's load error over the whole batch at the end of every step. The
// sigmoid router picks the top-2 among the better of two groups of four.
module {
  moe.transformer @bias_balancing {family = "deepseek_v3", vocab = 256,
                                   hidden = 32, layers = 2,
                                   heads = 4, kv_heads = 2, experts = 8,
                                   top_k = 2, ffn = 16, seq = 16, batch = 4,
                                   dense_layers = array<i64: 0>,
                                   scoring = #moe.scoring<sigmoid>,
                                   routed_scaling_factor = 2.5 : f32,
                                   n_group = 2, topk_group = 1,
                                   bias_update_rate = 0.01 : f32,
                                   aux_coef = 0.0 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
