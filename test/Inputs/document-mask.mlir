// The tiny model with document masking: a document ends after each '.'
// (byte 46) of the synthetic corpus, some fifteen documents over a batch
// of 4 x 96 tokens. No load-balancing loss or capacity factor, so that a
// step equals its documents' steps (test/moe-run/document-mask.test).
module {
  moe.transformer @doc {vocab = 256, hidden = 64, layers = 2, heads = 4,
                        kv_heads = 2, experts = 4, top_k = 2, ffn = 128,
                        seq = 96, batch = 4, dense_layers = array<i64: 0>,
                        aux_coef = 0.0 : f32, document_mask = true,
                        eos_token_id = 46}
}
