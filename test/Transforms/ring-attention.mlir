// RUN: moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-ring-attention="comm=ring" | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-ring-attention="comm=auto" | FileCheck %s --check-prefix=AUTO
// RUN: moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-ring-attention="comm=allgather" | FileCheck %s --check-prefix=GATHER
// RUN: not moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-ring-attention="comm=star" 2>&1 | FileCheck %s --check-prefix=BAD

// Ring attention over cp = 2: the attention and its gradient read the
// rank's key/value blocks and pass them around (ring); the all-gathers of
// the keys and values and the reduce-scatters of their gradients go.
moe.mesh @mesh(cp = 2)
moe.transformer @gqa {vocab = 32, hidden = 16, layers = 1, heads = 4,
                      kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 8,
                      batch = 2, dense_layers = array<i64: 0>}
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: moe.all_gather
// CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 4 : i64, num_kv_heads = 2 : i64, ring, sequence_axes = ["cp"]} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x4xf32>)
// CHECK: moe.attention_grad {{.*}} {num_heads = 4 : i64, num_kv_heads = 2 : i64, ring, sequence_axes = ["cp"]} : {{.*}} -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NOT: moe.reduce_scatter
// CHECK-NOT: moe.all_gather
// The compiler's choice: grouped-query attention over two ranks keeps one
// all-gather of its few key/value heads.
// AUTO-LABEL: func.func @train_step
// AUTO: moe.all_gather {{.*}} {axes = ["cp"], dim = 1 : i64, mesh = @mesh} : (tensor<2x4x8xf32>) -> tensor<2x8x8xf32>
// AUTO: moe.attention {{.*}} {num_heads = 4 : i64, num_kv_heads = 2 : i64, sequence_axes = ["cp"]}
// GATHER-LABEL: func.func @train_step
// GATHER: moe.all_gather {{.*}} {axes = ["cp"]
// GATHER-NOT: {{ ring,}}
// BAD: error: unknown cp-comm 'star': expected auto, ring or allgather

// -----

// Multi-head attention (as many key/value heads as query heads): the
// compiler takes the ring even over two ranks.
moe.mesh @mesh(cp = 2)
moe.transformer @mha {vocab = 32, hidden = 16, layers = 1, heads = 2,
                      kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 8,
                      batch = 2, dense_layers = array<i64: 0>}
// CHECK-LABEL: func.func @train_step
// CHECK: moe.attention {{.*}} ring
// AUTO-LABEL: func.func @train_step
// AUTO-NOT: moe.all_gather
// AUTO: moe.attention {{.*}} ring
// GATHER-LABEL: func.func @train_step
// GATHER: moe.all_gather
