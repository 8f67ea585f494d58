// Grouped-query attention with Llama 3's scaled RoPE over a pretraining
// context of 4 positions (shorter than seq).
module {
  moe.transformer @llama3 {vocab = 256, hidden = 32, layers = 2, heads = 4,
                           kv_heads = 2, experts = 4, top_k = 2, ffn = 16,
                           seq = 16, batch = 4,
                           rope_scaling = #moe.rope_scaling<llama3, factor = 8.0, original_max_position_embeddings = 4, low_freq_factor = 1.0, high_freq_factor = 4.0>}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
