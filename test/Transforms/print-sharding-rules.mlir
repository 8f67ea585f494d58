// RUN: moe-opt %s --moe-print-sharding-rules --verify-diagnostics

func.func @rules(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>,
                 %q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>,
                 %wt: tensor<2x4x2xf32>, %i: tensor<2x4x2xi32>,
                 %w1: tensor<4x6x8xf32>, %w2: tensor<4x8x6xf32>,
                 %t: tensor<2x4xi32>) {
  // expected-remark @+1 {{sharding rule: (*0, *1, k), (n, k) -> (*0, *1, n)}}
  %y = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  // expected-remark @+1 {{sharding rule: (*0, *1, n), (*0, *1, k) -> (n, k)}}
  %dw = moe.linear_grad_weight %y, %x : (tensor<2x4x16xf32>, tensor<2x4x8xf32>) -> tensor<16x8xf32>
  // expected-remark @+1 {{sharding rule: (b, s, [g r d]), (b, t, [g d]), (b, t, [g v]) -> (b, s, [g r v]), (b, [g r], s); pinned: r d t v}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 4, num_kv_heads = 2} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
  // expected-remark @+1 {{sharding rule: (b, s, [h d]) -> (b, s, [h d]); pinned: d}}
  %r = moe.rope %q {num_heads = 4, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // MLA's per-head splits and joins: splitting the heads splits each part;
  // a shared part stays whole, and its split is a sum over the heads.
  // expected-remark @+1 {{sharding rule: (*0, *1, [h d]) -> (*0, *1, [h a]), (*0, *1, [h c]); pinned: d a c}}
  %qa, %qb = moe.split_heads %q {num_heads = 4} : (tensor<2x4x8xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>)
  // expected-remark @+1 {{sharding rule: (*0, *1, [h d]) -> (*0, *1, [h a]), (*0, *1, c); pinned: d a c}}
  %sa, %sb = moe.split_heads %q {num_heads = 4} : (tensor<2x4x8xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x1xf32>)
  // expected-remark @+1 {{sharding rule: (*0, *1, [h a]), (*0, *1, c) -> (*0, *1, [h d]); pinned: a c d}}
  %joined = moe.concat_heads %sa, %sb {num_heads = 4} : (tensor<2x4x4xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  // expected-remark @+1 {{sharding rule: (*0, *1, h), (*0, *1, k), (*0, *1, k), (e, f, h), (e, f, h), (e, h, f) -> (*0, *1, h); pinned: h k}}
  %e = moe.experts %x, %wt, %i, %w1, %w1, %w2 : (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x6x8xf32>, tensor<4x6x8xf32>, tensor<4x8x6xf32>) -> tensor<2x4x8xf32>
  // expected-remark @+1 {{sharding rule: (*0, *1, v), (*0, *1) -> (); pinned: v; partial results are not sums}}
  %ce = moe.cross_entropy %y, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  // expected-remark @+1 {{sharding rule: (0.0, 0.1), () -> (); partial results are not sums}}
  %n = moe.global_norm %dw, %ce : (tensor<16x8xf32>, tensor<f32>) -> tensor<f32>
  return
}
