// Tied embeddings (HF tie_word_embeddings): the LM head reads the
// embedding table, whose gradient sums the head's and the lookup's.
module {
  moe.transformer @tied {vocab = 256, hidden = 32, layers = 2, heads = 4,
                         kv_heads = 2, experts = 4, top_k = 2, ffn = 24,
                         seq = 16, batch = 4, tie_word_embeddings = true}
  moe.adamw_config {lr = 2.0e-3 : f32, warmup = 0, decay_steps = 10}
}
