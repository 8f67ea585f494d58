// models/tiny.mlir with a shorter step for the virtual GPU's tests (issue
// 46): 2 sequences of 32 tokens a step instead of 8 of 64. Everything else
// (layers, widths, experts, the optimizer) is the tiny model's. The virtual
// GPU runs a fiber per CUDA thread, and the attention kernels' work grows
// with the square of the sequence: a step takes about 1 s here against 10 s
// for the tiny model.
module {
  moe.transformer @tiny_short {vocab = 256, hidden = 64, layers = 2,
                               heads = 4, kv_heads = 2, experts = 4,
                               top_k = 2, ffn = 128, seq = 32, batch = 2,
                               dense_layers = array<i64: 0>,
                               aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 3.0e-3 : f32, min_lr = 3.0e-4 : f32, warmup = 20,
                    decay_steps = 300, weight_decay = 0.1 : f32,
                    max_grad_norm = 1.0 : f32}
}
