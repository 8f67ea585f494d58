// The CPU step benchmark model: big enough that GEMMs dominate (13M
// parameters, 1024 tokens per step), small enough for 2 cores.
module {
  moe.transformer @cpu_step {vocab = 512, hidden = 256, layers = 4, heads = 8,
                             kv_heads = 2, experts = 8, top_k = 2, ffn = 512,
                             seq = 256, batch = 4, dense_layers = array<i64: 0>}
  moe.adamw_config {lr = 1.0e-3 : f32, warmup = 10, decay_steps = 1000}
}
