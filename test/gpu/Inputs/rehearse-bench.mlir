// The benchmark's stand-in in the GPU check's rehearsal (test/gpu/run.sh
// --rehearse): bench/models/gpu-moe.mlir's form (every layer MoE, as HF
// transformers' MixtralForCausalLM, the PyTorch peer, has them) at the tiny
// model's widths in one layer, which the virtual GPU runs in seconds a step.
module {
  moe.transformer @rehearse_bench {vocab = 256, hidden = 64, layers = 1,
                                   heads = 4, kv_heads = 2, experts = 4,
                                   top_k = 2, ffn = 128, seq = 64, batch = 8,
                                   aux_coef = 0.01 : f32}
  moe.adamw_config {lr = 3.0e-4 : f32, warmup = 10, decay_steps = 1000,
                    max_grad_norm = 1.0 : f32}
}
