// The tiny model's layers on a batch of 4 sequences of 16 tokens (an
// eighth of its tokens): the virtual GPU runs a fiber per CUDA thread, so
// its mesh tests train on few tokens.
module {
  moe.transformer @small {vocab = 256, hidden = 64, layers = 2, heads = 4,
                          kv_heads = 2, experts = 4, top_k = 2, ffn = 128,
                          seq = 16, batch = 4, dense_layers = array<i64: 0>,
                          aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 3.0e-3 : f32, min_lr = 3.0e-4 : f32, warmup = 20,
                    decay_steps = 300, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
