// GPT as in Megatron-LM 2021 (Narayanan et al., Table 1): its 4h GeLU MLP written as a SwiGLU of width ~8h/3 (the same FLOPs and weights within 0.01%), all layers dense.
module {
  moe.transformer @gpt_39_1b {vocab = 51200, hidden = 8192, layers = 48,
      heads = 64, kv_heads = 64, experts = 1, top_k = 1, ffn = 21848,
      seq = 2048, batch = 1, dense_ffn = 21848,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47>}
}
