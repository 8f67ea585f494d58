// Qwen3-MoE (its HF names: mlp.gate, mlp.experts.{e}.gate_proj, ...) with
// its attention: QK-norm (each head's query and key RMS-normalised
// before RoPE, one weight of head_dim each) with head_dim 12 independent of
// hidden / heads, grouped over 2 key/value heads; top-2 of 4 experts
// without renormalisation (norm_topk_prob = false).
module {
  moe.transformer @qk_norm {family = "qwen3_moe", vocab = 256, hidden = 32,
                            layers = 2, heads = 4,
                            kv_heads = 2, head_dim = 12, qk_norm = true,
                            experts = 4, top_k = 2, ffn = 24, seq = 16,
                            batch = 4, norm_topk_prob = false,
                            rms_eps = 1.0e-6 : f32}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
