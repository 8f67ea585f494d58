// A one-layer MoE for moe-fuse-linear-cross-entropy's test: its LM head
// writes [2, 4, 32] logits unfused.
moe.transformer @head {vocab = 32, hidden = 16, layers = 1, heads = 2,
                       kv_heads = 2, experts = 2, top_k = 1, ffn = 16,
                       seq = 4, batch = 2}
