// propagate-sharding.mlir's context-parallel module, for its fold-experts
// run.
moe.mesh @mesh(cp = 2, tp = 2)
moe.transformer @cp {vocab = 32, hidden = 16, layers = 1, heads = 4,
                     kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 8,
                     batch = 2}
