// DeepSeek-V3 (HF DeepseekV3ForCausalLM, deepseek-ai/DeepSeek-V3
// config.json): 61 layers, the first 3 dense (intermediate_size 18432),
// the others 256 routed experts of moe_intermediate_size 2048, top-8
// among the best 4 of 8 groups by sigmoid scores, routed_scaling_factor
// 2.5, one shared expert; multi-head latent attention with 128 heads
// (q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
// qk_rope_head_dim 64, v_head_dim 128), rms_norm_eps 1e-6, rope_theta
// 1e4, untied embeddings. Balanced as its report trained it:
// auxiliary-loss-free bias updates of 0.001 and a sequence-wise balance
// loss of 0.0001, no other aux loss. Without the multi-token-prediction
// module, 671.03B parameters, 37.55B active per token. A step of 15360
// sequences of 4096 tokens (its pretraining batch after the ramp; the
// YaRN RoPE scaling of its config came with the later context
// extension).
module {
  moe.transformer @deepseek_v3_671b {family = "deepseek_v3", vocab = 129280,
                                     hidden = 7168, layers = 61, heads = 128,
                                     kv_heads = 128, q_lora_rank = 1536,
                                     kv_lora_rank = 512,
                                     qk_nope_head_dim = 128,
                                     qk_rope_head_dim = 64, v_head_dim = 128,
                                     dense_layers = array<i64: 0, 1, 2>,
                                     dense_ffn = 18432, experts = 256,
                                     top_k = 8, ffn = 2048,
                                     shared_experts = 1,
                                     scoring = #moe.scoring<sigmoid>,
                                     n_group = 8, topk_group = 4,
                                     norm_topk_prob = true,
                                     routed_scaling_factor = 2.5 : f32,
                                     bias_update_rate = 1.0e-3 : f32,
                                     seq_aux_coef = 1.0e-4 : f32,
                                     aux_coef = 0.0 : f32,
                                     rms_eps = 1.0e-6 : f32,
                                     rope_theta = 1.0e4 : f32, seq = 4096,
                                     batch = 15360,
                                     precision = #moe.precision<bf16>}
}
