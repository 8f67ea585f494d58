// GPT 16B of Megatron-LM's H100 weak-scaling table (NVIDIA/Megatron-LM README.md, images/model_table.png,
// Megatron-Core r0.8.0): 48 heads, hidden 6144, 32 layers; vocabulary 131072 and sequences of 4096 from the
// README's text. Multi-head attention; its MLP is assumed GPT's 4h GeLU (the table does not give it), written as
// a SwiGLU of width ~8h/3, 16384 (the same FLOPs and weights within 0.1%; divisible by tp), all layers dense;
// untied embeddings (Megatron's default).
module {
  moe.transformer @mcore_gpt_16b {vocab = 131072, hidden = 6144, layers = 32,
      heads = 48, kv_heads = 48, experts = 1, top_k = 1, ffn = 16384,
      seq = 4096, batch = 1, dense_ffn = 16384,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31>}
}
