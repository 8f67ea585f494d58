// RUN: moe-opt %s --split-input-file --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-save-expert-activations | FileCheck %s

// One rank's experts keep their up projections, [tokens..., k, 2, F] in
// f32 (here on 2 of the batch's 4 sequences, data parallel); the
// gradient reads them as its last operand instead of recomputing them.
moe.mesh @mesh(dp = 2)
moe.transformer @kept {vocab = 32, hidden = 16, layers = 1, heads = 2,
                       kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                       batch = 4}
// CHECK-LABEL: func.func @train_step
// CHECK: %{{.*}}, %[[HIDDEN:.*]] = moe.experts {{.*}} -> (tensor<2x4x16xf32>, tensor<2x4x2x2x8xf32>)
// CHECK: moe.experts_grad {{.*}}, %[[HIDDEN]] : ({{.*}}, tensor<2x4x2x2x8xf32>) -> (

// -----

// Expert-parallel experts keep recomputing: their rows are computed on the
// experts' ranks.
moe.mesh @mesh(dp = 2, ep = 2)
moe.transformer @ep {vocab = 32, hidden = 16, layers = 1, heads = 2,
                     kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                     batch = 4}
// CHECK-LABEL: func.func @train_step
// CHECK: moe.experts {{.*}} {expert_axes = ["ep"]} : ({{.*}}) -> tensor<1x4x16xf32>
// CHECK: moe.experts_grad {{.*}} {expert_axes = ["ep"]} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> (
