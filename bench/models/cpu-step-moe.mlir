// cpu-step.mlir with every layer MoE: the model HF transformers'
// MixtralForCausalLM can be (it has no dense layers), so that moe-run and
// the PyTorch peer in bench/run.sh do the same work.
module {
  moe.transformer @cpu_step_moe {vocab = 512, hidden = 256, layers = 4,
                                 heads = 8, kv_heads = 2, experts = 8,
                                 top_k = 2, ffn = 512, seq = 256, batch = 4}
  moe.adamw_config {lr = 1.0e-3 : f32, warmup = 10, decay_steps = 1000}
}
