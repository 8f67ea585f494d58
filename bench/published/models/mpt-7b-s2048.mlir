// MPT-7B (MosaicML; llm-foundry scripts/train/yamls/pretrain/mpt-7b.yaml: d_model 4096, n_heads 32,
// n_layers 32, expansion_ratio 4, vocab_size 50368): multi-head attention, its 4h = 16384 GeLU MLP written as a
// SwiGLU of width ~8h/3, 10920 (the same FLOPs and weights within 0.1%), all layers dense, embeddings tied (MPT's
// LM head reads the token embedding). MPT uses ALiBi and no position embedding, LayerNorm without biases;
// moec's model has RoPE and RMSNorm instead (their FLOPs are negligible). Sequences of 2048 tokens, as
// llm-foundry's benchmark table ran it.
module {
  moe.transformer @mpt_7b {vocab = 50368, hidden = 4096, layers = 32,
      heads = 32, kv_heads = 32, experts = 1, top_k = 1, ffn = 10920,
      seq = 2048, batch = 1, dense_ffn = 10920,
      tie_word_embeddings = true,
      dense_layers = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31>}
}
