// MPT-30B (MosaicML; llm-foundry scripts/train/yamls/pretrain/mpt-30b.yaml: d_model 7168, n_heads 56,
// n_layers 48, expansion_ratio 4, vocab_size 50368): multi-head attention, its 4h = 28672 GeLU MLP written as a
// SwiGLU of width ~8h/3, 19112 (the same FLOPs and weights within 0.1%), all layers dense, embeddings tied (MPT's
// LM head reads the token embedding). MPT uses ALiBi and no position embedding, LayerNorm without biases;
// moec's model has RoPE and RMSNorm instead (their FLOPs are negligible). Sequences of 2048 tokens, as
// llm-foundry's benchmark table ran it.
module {
  moe.transformer @mpt_30b {vocab = 50368, hidden = 7168, layers = 48,
      heads = 56, kv_heads = 56, experts = 1, top_k = 1, ffn = 19112,
      seq = 2048, batch = 1, dense_ffn = 19112,
      tie_word_embeddings = true,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47>}
}
