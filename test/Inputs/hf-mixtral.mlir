// A model HF's MixtralForCausalLM can hold: every layer MoE, GQA, top-2.
module {
  moe.transformer @hf_mixtral {vocab = 128, hidden = 32, layers = 2, heads = 4,
                               kv_heads = 2, experts = 4, top_k = 2, ffn = 48,
                               seq = 16, batch = 3, rope_theta = 1.0e6 : f32}
}
