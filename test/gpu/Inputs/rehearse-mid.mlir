// The mid-size model's stand-in in the GPU check's rehearsal (test/gpu/run.sh
// --rehearse): bench/models/gpu-mid.mlir's widths (hidden 512, 8 heads
// over 4 key-value heads, experts of 1408), which take cuBLASLt's and the
// attention kernel's paths for wide operands, in one layer of 4 experts,
// one sequence of 128 a step (two of the attention kernel's 64-row tiles)
// and a vocabulary of 1024, so that the virtual GPU runs a step in seconds
// rather than the mid-size model's minutes.
module {
  moe.transformer @rehearse_mid {vocab = 1024, hidden = 512, layers = 1,
                                 heads = 8, kv_heads = 4, experts = 4, top_k = 2,
                                 ffn = 1408, seq = 128, batch = 1,
                                 aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 1.0e-3 : f32, warmup = 2, decay_steps = 100,
                    max_grad_norm = 1.0 : f32}
}
