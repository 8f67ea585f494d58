// DeepSeek-V3's router losses on its sigmoid, group-limited, biased router:
// the sequence-wise balance loss (seq_aux_coef, over the router's own
// selection) and the router z-loss (z_loss_coef), both per MoE layer and
// summed over the layers. The coefficients are large for a test, so that
// the losses move the gradients well above the checks' tolerances.
module {
  moe.transformer @router_losses {family = "deepseek_v3", vocab = 256,
                                  hidden = 32, layers = 3,
                                  heads = 4, kv_heads = 2, experts = 8,
                                  top_k = 2, ffn = 16, seq = 16, batch = 4,
                                  dense_layers = array<i64: 0>,
                                  shared_experts = 1,
                                  scoring = #moe.scoring<sigmoid>,
                                  routed_scaling_factor = 2.5 : f32,
                                  n_group = 2, topk_group = 1,
                                  bias_update_rate = 0.01 : f32,
                                  aux_coef = 0.0 : f32,
                                  seq_aux_coef = 0.1 : f32,
                                  z_loss_coef = 0.01 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
