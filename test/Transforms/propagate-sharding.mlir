// RUN: moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --verify-diagnostics | FileCheck %s
// RUN: moe-opt %S/Inputs/fold-experts.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding="fold-experts=cp" | FileCheck %s --check-prefix=FOLD

// Data parallel over dp, Megatron tensor parallel over tp, FSDP storage over
// fsdp; every decision carries its reason.
moe.mesh @mesh(dp = 2, fsdp = 2, tp = 2)
moe.transformer @small {vocab = 32, hidden = 16, layers = 1, heads = 4,
                        kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                        batch = 4}
// CHECK-LABEL: moe.param @model.layers.0.self_attn.q_proj.weight : tensor<16x16xf32>
// CHECK-SAME: sharding = #moe.sharding<@mesh, [{tp, fsdp}, {}]>
// CHECK-SAME: sharding_origin = ["column-parallel linear (Megatron): output features split over tp; FSDP: stored split over fsdp, gathered before use", ""]
// CHECK: moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg : tensor<16x16xf32>
// CHECK-SAME: sharding = #moe.sharding<@mesh, [{tp, fsdp}, {}]>
// CHECK: moe.param @model.layers.0.self_attn.o_proj.weight : tensor<16x16xf32>
// CHECK-SAME: sharding = #moe.sharding<@mesh, [{fsdp}, {tp}]>
// CHECK: moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<4x16x8xf32>
// CHECK-SAME: sharding = #moe.sharding<@mesh, [{fsdp}, {}, {tp}]>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: moe.sharding = #moe.sharding<@mesh, [{dp, fsdp}, {}]>, moe.sharding_origin = "dim 0: data parallel: batch split over dp, fsdp"
// The column-parallel projection splits its output features over tp; FSDP
// (storage only) does not steer the computation.
// CHECK: moe.linear {{.*}}moe.sharding = [#moe.sharding<@mesh, [{dp, fsdp}, {}, {tp}]>]
// CHECK-SAME: "dim 0: data parallel: batch split over dp, fsdp; dim 2: column-parallel
// Attention keeps whole sequences and splits head groups over tp.
// CHECK: moe.attention {{.*}}moe.sharding = [#moe.sharding<@mesh, [{dp, fsdp}, {}, {tp}]>, #moe.sharding<@mesh, [{dp, fsdp}, {tp}, {}]>]
// Sequence parallelism: the row-parallel projection's output joins the
// residual stream split by sequence over tp (the partitioner turns its
// partial sums into a reduce-scatter).
// CHECK: moe.linear {{.*}}moe.sharding = [#moe.sharding<@mesh, [{dp, fsdp}, {tp}, {}]>]
// CHECK-SAME: "dim 0: data parallel: batch split over dp, fsdp; dim 1: sequence parallel (Megatron): the residual stream splits the sequence over tp"
// Weight gradients keep the weight's tensor-parallel split.
// CHECK: moe.linear_grad_weight {{.*}}moe.sharding = [#moe.sharding<@mesh, [{}, {tp}]>]

// -----

// Expert parallelism folds onto the data ranks: tokens split over dp and
// ep, experts over ep.
moe.mesh @mesh(dp = 2, ep = 2)
moe.transformer @experts {vocab = 32, hidden = 16, layers = 1, heads = 2,
                          kv_heads = 2, experts = 4, top_k = 2, ffn = 8,
                          seq = 4, batch = 4}
// CHECK: moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x8x16xf32>
// CHECK-SAME: sharding = #moe.sharding<@mesh, [{ep}, {}, {}]>
// CHECK-SAME: sharding_origin = ["expert parallel: experts split over ep", "", ""]
// CHECK: moe.experts {{.*}}moe.sharding = [#moe.sharding<@mesh, [{dp, ep}, {}, {}]>]
// CHECK: moe.experts_grad {{.*}}moe.sharding = [#moe.sharding<@mesh, [{dp, ep}, {}, {}]>, #moe.sharding<@mesh, [{dp, ep}, {}, {}]>, #moe.sharding<@mesh, [{ep}, {}, {}]>, #moe.sharding<@mesh, [{ep}, {}, {}]>, #moe.sharding<@mesh, [{ep}, {}, {}]>]

// -----

// A user pin wins over the policy.
moe.mesh @mesh(dp = 2, tp = 2)
moe.param @w : tensor<8x4xf32> {init = #moe.init<normal>, init_std = 0.02 : f32, sharding = #moe.sharding<@mesh, [{}, {tp}]>}
// CHECK: moe.param @w : tensor<8x4xf32> {{.*}}sharding = #moe.sharding<@mesh, [{}, {tp}]>, sharding_origin = ["user pin", "user pin"]
func.func @forward(%x: tensor<2x4x4xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %w = moe.get_param @w : tensor<8x4xf32>
  %p = moe.shard %x {sharding = #moe.sharding<@mesh, [{}, {dp}, {}]>} : tensor<2x4x4xf32>
  // CHECK: moe.linear {{.*}}moe.sharding = [#moe.sharding<@mesh, [{}, {dp}, {}]>]
  %l = moe.linear %p, %w : (tensor<2x4x4xf32>, tensor<8x4xf32>) -> tensor<2x4x8xf32>
  %ce = moe.cross_entropy %l, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %ce : tensor<f32>
}

// -----

// expected-error @+1 {{kv_heads (2) is not divisible by tp (4): tensor parallelism splits attention by key/value head groups and the MLPs by width}}
moe.mesh @mesh(tp = 4)
moe.transformer @m {vocab = 32, hidden = 16, layers = 1, heads = 4, kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4, batch = 4}

// -----

// expected-error @+1 {{experts (4) is not divisible by ep (8): expert parallelism gives each rank of ep an equal share of the experts}}
moe.mesh @mesh(ep = 8)
moe.transformer @m {vocab = 32, hidden = 16, layers = 1, heads = 4, kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4, batch = 8}

// -----

moe.mesh @mesh(dp = 3)
// expected-error @+1 {{the batch (4) is not divisible by the data-parallel ranks (3 over dp)}}
moe.transformer @m {vocab = 32, hidden = 16, layers = 1, heads = 4, kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4, batch = 4}

// -----

// expected-error @+1 {{expected exactly one moe.mesh to shard over (moec --mesh dp=2,tp=2)}}
module {
  moe.transformer @m {vocab = 32, hidden = 16, layers = 1, heads = 4, kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4, batch = 4}
}

// -----

// Context parallelism: the sequence splits over cp (then tp) from the
// embedding on. With fold-experts=cp (Inputs/fold-experts.mlir, the same
// module), the experts split over the cp ranks too (MoE parallel folding).
moe.mesh @mesh(cp = 2, tp = 2)
moe.transformer @cp {vocab = 32, hidden = 16, layers = 1, heads = 4,
                     kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 8,
                     batch = 2, dense_layers = array<i64: 0>}
// CHECK: moe.embedding {{.*}}moe.sharding = [#moe.sharding<@mesh, [{}, {cp, tp}, {}]>]
// FOLD: moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x8x16xf32> {{{.*}}sharding = #moe.sharding<@mesh, [{cp}, {tp}, {}]>, sharding_origin = ["expert parallelism folded over cp (MoE parallel folding): the experts split over its ranks too"
