// DeepSeek's shared experts: every MoE layer also runs one always-active
// SwiGLU MLP of width shared_experts * ffn, added to the routed experts'
// output. A dense first layer, top-2 of 4 experts.
module {
  moe.transformer @shared {vocab = 256, hidden = 32, layers = 2, heads = 4,
                           kv_heads = 2, experts = 4, top_k = 2, ffn = 24,
                           shared_experts = 2, seq = 16, batch = 4,
                           dense_layers = array<i64: 0>, dense_ffn = 40}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
