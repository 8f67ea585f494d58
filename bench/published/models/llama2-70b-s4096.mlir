// Llama 2 70B (Meta; meta-llama/Llama-2-70b-hf config.json): grouped-query attention (64 query, 8 key/value heads),
// SwiGLU of 28672, 32K vocabulary, untied embeddings, all layers dense. Sequences of 4096 tokens, as NeMo 24.07's
// DGX-H100 performance summary ran it.
module {
  moe.transformer @llama2_70b {vocab = 32000, hidden = 8192, layers = 80,
      heads = 64, kv_heads = 8, experts = 1, top_k = 1, ffn = 28672,
      seq = 4096, batch = 1, dense_ffn = 28672,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79>}
}
