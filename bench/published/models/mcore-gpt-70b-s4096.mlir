// GPT 70B of Megatron-LM's H100 weak-scaling table (NVIDIA/Megatron-LM README.md, images/model_table.png,
// Megatron-Core r0.8.0): 64 heads, hidden 8192, 84 layers; vocabulary 131072 and sequences of 4096 from the
// README's text. Multi-head attention; its MLP is assumed GPT's 4h GeLU (the table does not give it), written as
// a SwiGLU of width ~8h/3, 21848 (the same FLOPs and weights within 0.1%; divisible by tp), all layers dense;
// untied embeddings (Megatron's default).
module {
  moe.transformer @mcore_gpt_70b {vocab = 131072, hidden = 8192, layers = 84,
      heads = 64, kv_heads = 64, experts = 1, top_k = 1, ffn = 21848,
      seq = 4096, batch = 1, dense_ffn = 21848,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83>}
}
