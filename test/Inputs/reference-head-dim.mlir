// Qwen3's attention width: head_dim 12 with hidden 32 and 4 heads (q is 48
// wide, o_proj maps 48 back to 32), grouped over 2 key/value heads.
module {
  moe.transformer @head_dim {vocab = 256, hidden = 32, layers = 2, heads = 4,
                             kv_heads = 2, head_dim = 12, experts = 4,
                             top_k = 2, ffn = 24, seq = 16, batch = 4}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
