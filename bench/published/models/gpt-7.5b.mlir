// GPT as in Megatron-LM 2021 (Narayanan et al., Table 1): its 4h GeLU MLP written as a SwiGLU of width ~8h/3 (the same FLOPs and weights within 0.01%), all layers dense.
module {
  moe.transformer @gpt_7_5b {vocab = 51200, hidden = 4096, layers = 36,
      heads = 32, kv_heads = 32, experts = 1, top_k = 1, ffn = 10920,
      seq = 2048, batch = 1, dense_ffn = 10920,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35>}
}
