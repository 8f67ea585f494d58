// GPT as in Megatron-LM 2021 (Narayanan et al., Table 1): its 4h GeLU MLP written as a SwiGLU of width ~8h/3 (the same FLOPs and weights within 0.01%), all layers dense.
module {
  moe.transformer @gpt_145_6b {vocab = 51200, hidden = 12288, layers = 80,
      heads = 96, kv_heads = 96, experts = 1, top_k = 1, ffn = 32768,
      seq = 2048, batch = 1, dense_ffn = 32768,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79>}
}
