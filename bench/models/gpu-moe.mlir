// The 1-GPU benchmark configuration (test/gpu/run.sh, issue 6): an MoE of
// Mixtral's proportions small enough for one GPU with fp32 weights and AdamW
// state (1.3B parameters, 0.46B active; 24.2 GiB planned), with GEMMs large
// enough to measure the tensor cores rather than the launches.
module {
  moe.transformer @gpu_moe {vocab = 32000, hidden = 2048, layers = 4,
                            heads = 16, kv_heads = 8, experts = 8, top_k = 2,
                            ffn = 5632, seq = 2048, batch = 8}
  moe.adamw_config {lr = 3.0e-4 : f32, warmup = 10, decay_steps = 1000}
}
