// RUN: moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --verify-diagnostics | FileCheck %s
// RUN: moe-opt %S/Inputs/delayed-fp8.mlir --moe-expand-transformer --moe-fp8="scaling=delayed amax-history=4" --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition | FileCheck %s --check-prefix=FP8

// An FP8 amax history is split like its experts, over ep: each rank keeps
// the histories of its 2 experts. Ranks differing on dp hold copies, whose
// amaxes the update combines into one maximum.
// FP8: moe.param @model.layers.0.block_sparse_moe.experts.fp8_amax_history : tensor<2x9x5xf32> {{{.*}}sharding = #moe.sharding<@mesh, [{ep}, {}, {}]>}
// FP8: moe.experts {{.*}}expert_axes = ["ep"], fp8 = #moe.fp8<delayed>, fp8_history = @model.layers.0.block_sparse_moe.experts.fp8_amax_history
// FP8: moe.fp8_amax_update @model.layers.0.block_sparse_moe.experts.fp8_amax_history {axes = ["dp"], mesh = @mesh}

// FSDP x tensor parallelism with Megatron's sequence parallelism: weights
// are stored as per-rank blocks and gathered over fsdp right before use;
// norms and residuals run on 1/tp of the sequence, which is gathered before
// column-parallel linears and reduce-scattered after row-parallel ones;
// gradients are reduce-scattered over fsdp for their AdamW update.
moe.mesh @mesh(fsdp = 2, tp = 2)
moe.transformer @small {vocab = 32, hidden = 16, layers = 1, heads = 4,
                        kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                        batch = 4, dense_layers = array<i64: 0>}
// CHECK: module attributes {{{.*}}moe.partitioned
// CHECK: moe.param @model.layers.0.self_attn.q_proj.weight : tensor<4x16xf32> {{.*}}sharding = #moe.sharding<@mesh, [{tp, fsdp}, {}]>
// CHECK-LABEL: func.func @train_step(%{{.*}}: tensor<2x4xi32>
// CHECK: moe.slice %{{.*}} {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4xi32>) -> tensor<2x2xi32>
// CHECK: moe.rms_norm {{.*}} -> tensor<2x2x16xf32>
// CHECK: %[[WQ:.*]] = moe.get_param @model.layers.0.self_attn.q_proj.weight : tensor<4x16xf32>
// CHECK-NEXT: %[[X:.*]] = moe.all_gather %{{.*}} {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[GQ:.*]] = moe.all_gather %[[WQ]] {axes = ["fsdp"], dim = 0 : i64, mesh = @mesh} : (tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: moe.linear %[[X]], %[[GQ]] : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// Each rank keeps 2 of the 4 query heads and 1 of the 2 key/value heads.
// CHECK: moe.rope %{{.*}} {num_heads = 2 : i64
// CHECK: moe.attention {{.*}} {num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)
// CHECK: %[[O:.*]] = moe.linear %{{.*}} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: moe.reduce_scatter %[[O]] {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>
// The mean loss and its gradient count tokens over every rank that holds
// some: the data ranks and, with sequence parallelism, the tp ranks.
// CHECK: moe.cross_entropy {{.*}} {token_axes = ["fsdp", "tp"]}
// CHECK: moe.cross_entropy_grad {{.*}} {token_axes = ["fsdp", "tp"]}
// The input gradients of the column-parallel linears that share an input are
// partial sums over tp; they are added while still partial and reduced once.
// CHECK: %[[FANIN:.*]] = moe.add %{{.*}}, %{{.*}} : tensor<2x4x16xf32>
// CHECK-NEXT: %[[RS:.*]] = moe.reduce_scatter %[[FANIN]] {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>
// CHECK-NEXT: moe.rms_norm_grad %[[RS]]
// The q_proj gradient takes q_proj's split: each rank sums its own heads'
// rows over the gathered sequence of its batch slice (no gradient gathered,
// no tp reduction) and one reduce-scatter over fsdp lands it in q_proj's
// storage split; the norm sums squares over shards.
// CHECK: %[[GRADQ:.*]] = moe.linear_grad_weight %{{.*}}, %[[X]] : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[SQ:.*]] = moe.reduce_scatter %[[GRADQ]] {axes = ["fsdp"], dim = 0 : i64, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK: moe.global_norm {{.*}}input_axes = [{{.*}}["tp", "fsdp"]
// CHECK: moe.adamw_update @model.layers.0.self_attn.q_proj.weight, {{.*}}, %[[SQ]],
// CHECK: return {{.*}} : tensor<f32>, tensor<f32>, tensor<f32>

// -----

// Pure data parallelism: only gradient all-reduces.
moe.mesh @mesh(dp = 2)
moe.transformer @dp {vocab = 32, hidden = 16, layers = 1, heads = 2,
                     kv_heads = 2, experts = 2, top_k = 1, ffn = 8, seq = 4,
                     batch = 4, dense_layers = array<i64: 0>}
// CHECK-LABEL: func.func @train_step(%{{.*}}: tensor<2x4xi32>
// CHECK-NOT: moe.all_gather
// CHECK: moe.cross_entropy {{.*}} {token_axes = ["dp"]}
// CHECK: moe.all_reduce {{.*}} {axes = ["dp"], mesh = @mesh} : tensor<32x16xf32>
// CHECK-NOT: moe.reduce_scatter

// -----

// Expert parallelism folded onto data parallelism: each rank keeps its
// tokens and 2 of the 4 experts; the experts ops exchange tokens over ep, so
// expert gradients need no reduction over ep, only over dp.
moe.mesh @mesh(dp = 2, ep = 2)
moe.transformer @ep {vocab = 32, hidden = 16, layers = 1, heads = 2,
                     kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                     batch = 4}
// CHECK-LABEL: func.func @train_step(%{{.*}}: tensor<1x4xi32>
// CHECK: moe.experts {{.*}} {expert_axes = ["ep"]} : (tensor<1x4x16xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<1x4x16xf32>
// CHECK: %{{.*}}, %{{.*}}, %[[DW1:.*]], %{{.*}}, %{{.*}} = moe.experts_grad {{.*}} {expert_axes = ["ep"]}
// CHECK: moe.all_reduce %[[DW1]] {axes = ["dp"], mesh = @mesh} : tensor<2x8x16xf32>
// CHECK: moe.all_reduce {{.*}} {axes = ["dp", "ep"], mesh = @mesh} : tensor<32x16xf32>

// -----

// The experts' backward under tensor parallelism splits the expert width as
// its forward does: it reads the local expert weights and the forward's
// gathered tokens, gathers the output gradient (sequence parallel), and
// reduce-scatters the input gradient; no expert weight is gathered.
moe.mesh @mesh(tp = 2)
moe.transformer @tp {vocab = 32, hidden = 16, layers = 1, heads = 2,
                     kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                     batch = 2}
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W1:.*]] = moe.get_param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x4x16xf32>
// CHECK: %[[X:.*]] = moe.all_gather %{{.*}} {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>
// CHECK: moe.experts %[[X]], %{{.*}}, %{{.*}}, %[[W1]],
// CHECK: %[[DY:.*]] = moe.all_gather %input_grad {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: tensor<4x8x16xf32>
// CHECK: %[[DX:.*]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = moe.experts_grad %[[DY]], %[[X]], %{{.*}}, %{{.*}}, %[[W1]], {{.*}} -> (tensor<2x4x16xf32>, tensor<2x4x2xf32>, tensor<4x4x16xf32>, tensor<4x4x16xf32>, tensor<4x16x4xf32>)
// CHECK: moe.reduce_scatter %[[DX]] {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>

// -----

// Context parallelism inside tensor parallelism: the sequence splits over
// {cp, tp} between blocks (cp outermost, load-balanced); a column-parallel
// linear gathers tp's part only, so RoPE and attention hold the rank's
// block of the sequence over cp (sequence_axes) and attention gathers its
// keys and values over cp; their gradients, sums over the query blocks,
// are reduce-scattered back, and weight gradients are summed over cp.
moe.mesh @mesh(cp = 2, tp = 2)
moe.transformer @cp {vocab = 32, hidden = 16, layers = 1, heads = 4,
                     kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 8,
                     batch = 2, dense_layers = array<i64: 0>}
// CHECK-LABEL: func.func @train_step(%{{.*}}: tensor<2x8xi32>
// CHECK: moe.slice %{{.*}} {axes = ["cp", "tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x8xi32>) -> tensor<2x2xi32>
// CHECK: moe.all_gather %{{.*}} {axes = ["tp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[Q:.*]] = moe.rope %{{.*}} {num_heads = 2 : i64, sequence_axes = ["cp"], theta = {{.*}}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[K:.*]] = moe.rope %{{.*}} {num_heads = 1 : i64, sequence_axes = ["cp"], theta = {{.*}}} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
// CHECK: %[[KW:.*]] = moe.all_gather %[[K]] {axes = ["cp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4x4xf32>) -> tensor<2x8x4xf32>
// CHECK: %[[VW:.*]] = moe.all_gather %{{.*}} {axes = ["cp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4x4xf32>) -> tensor<2x8x4xf32>
// CHECK: moe.attention %[[Q]], %[[KW]], %[[VW]] {num_heads = 2 : i64, num_kv_heads = 1 : i64, sequence_axes = ["cp"]} : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
// CHECK: moe.all_reduce %{{.*}} {axes = ["cp", "tp"], mesh = @mesh} : tensor<32x16xf32>
// CHECK: %{{.*}}, %[[DK:.*]], %[[DV:.*]] = moe.attention_grad {{.*}} sequence_axes = ["cp"]
// CHECK: moe.reduce_scatter %[[DK]] {axes = ["cp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
// CHECK: moe.rope_grad %{{.*}} {num_heads = 1 : i64, sequence_axes = ["cp"]
