// A small MoE layer over dp x ep, for the partitioning of FP8 amax histories.
moe.mesh @mesh(dp = 2, ep = 2)
moe.transformer @small {vocab = 32, hidden = 16, layers = 1, heads = 4,
                        kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                        batch = 4}
