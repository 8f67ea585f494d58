// GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, sequences of 2048) as NeMo's
// gpt3_175b config trains it: its 4h = 49152 GeLU MLP written as a SwiGLU of width 2/3 of it, 32768 (the same
// FLOPs and weights; divisible by tp), all layers dense. Vocabulary 50257 padded as Megatron pads it (to a multiple
// of 128 x tp 4): 50688. Learned absolute position embeddings, LayerNorm and the linears' biases are not modelled
// (moec's model has RoPE and RMSNorm; their FLOPs are negligible).
module {
  moe.transformer @gpt3_175b {vocab = 50688, hidden = 12288, layers = 96,
      heads = 96, kv_heads = 96, experts = 1, top_k = 1, ffn = 32768,
      seq = 2048, batch = 1, dense_ffn = 32768,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95>}
}
