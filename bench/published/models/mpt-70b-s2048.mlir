// MPT-70B (MosaicML; llm-foundry scripts/train/yamls/pretrain/mpt-70b.yaml: d_model 8192, n_heads 64,
// n_layers 80, expansion_ratio 4, vocab_size 50368): multi-head attention, its 4h = 32768 GeLU MLP written as a
// SwiGLU of width ~8h/3, 21848 (the same FLOPs and weights within 0.1%), all layers dense, embeddings tied (MPT's
// LM head reads the token embedding). MPT uses ALiBi and no position embedding, LayerNorm without biases;
// moec's model has RoPE and RMSNorm instead (their FLOPs are negligible). Sequences of 2048 tokens, as
// llm-foundry's benchmark table ran it.
module {
  moe.transformer @mpt_70b {vocab = 50368, hidden = 8192, layers = 80,
      heads = 64, kv_heads = 64, experts = 1, top_k = 1, ffn = 21848,
      seq = 2048, batch = 1, dense_ffn = 21848,
      tie_word_embeddings = true,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79>}
}
