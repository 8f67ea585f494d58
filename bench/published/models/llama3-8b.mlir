// Llama 3.1 8B (Meta): grouped-query attention, SwiGLU, 128K vocabulary, all layers dense.
module {
  moe.transformer @llama3_8b {vocab = 128256, hidden = 4096, layers = 32,
      heads = 32, kv_heads = 8, experts = 1, top_k = 1, ffn = 14336,
      seq = 8192, batch = 1, dense_ffn = 14336,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31>}
}
