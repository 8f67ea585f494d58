// A hand-written mesh with an axis moec does not implement.
module {
  moe.mesh @mesh(dp = 2, sp = 2)
  moe.transformer @tiny {vocab = 256, hidden = 64, layers = 2, heads = 4,
                         kv_heads = 2, experts = 4, top_k = 2, ffn = 128,
                         seq = 64, batch = 8}
}
