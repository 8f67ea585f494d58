// Nemotron-4 340B (NVIDIA, Nemotron-4 340B technical report / nvidia/Nemotron-4-340B-Base config): 96 layers,
// hidden 18432, 96 query and 8 key/value heads, RoPE, 256000 vocabulary, untied embeddings, no biases. Its
// squared-ReLU MLP of 73728 (non-gated) is written as a SwiGLU of width 2/3 of it, 49152 (the same FLOPs
// and weights; divisible by tp 8), all layers dense. Sequences of 4096 tokens, as NeMo 24.07 ran it.
module {
  moe.transformer @nemotron4_340b {vocab = 256000, hidden = 18432, layers = 96,
      heads = 96, kv_heads = 8, experts = 1, top_k = 1, ffn = 49152,
      seq = 4096, batch = 1, dense_ffn = 49152,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95>}
}
