// The GPU check's mid-size model (test/gpu/run.sh, issue 17): between the
// tiny model and the benchmark, wide enough that cuBLASLt picks its
// tensor-core kernels and the attention kernel runs several tiles a row,
// small enough that the CPU reference's 3 steps take seconds
// (test/gpu/prepare.sh). 81M parameters (29M active), 1024 tokens a
// step.
module {
  moe.transformer @gpu_mid {vocab = 8192, hidden = 512, layers = 4,
                            heads = 8, kv_heads = 4, experts = 8, top_k = 2,
                            ffn = 1408, seq = 256, batch = 4,
                            aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 1.0e-3 : f32, warmup = 2, decay_steps = 100,
                    max_grad_norm = 1.0 : f32}
}
