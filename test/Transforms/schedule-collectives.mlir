// RUN: moe-opt %s --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-schedule-collectives | FileCheck %s

// FSDP over 2 ranks, two layers. Parameter gathers run one pipeline unit
// (embedding, layer, head) ahead: the first layer's before the embedding
// reads its gathered table, the second layer's before the first layer's
// first norm, the head's (final norm and LM head) before the second layer's
// first norm.
moe.mesh @mesh(fsdp = 2)
moe.transformer @two {vocab = 32, hidden = 16, layers = 2, heads = 2,
                      kv_heads = 2, experts = 4, top_k = 2, ffn = 8, seq = 4,
                      batch = 4}
// CHECK-LABEL: func.func @train_step
// CHECK: moe.get_param @model.embed_tokens.weight
// CHECK-NEXT: moe.all_gather
// CHECK-NEXT: moe.get_param @model.layers.0.input_layernorm.weight
// CHECK: moe.all_gather %{{.*}} : (tensor<2x16x8xf32>) -> tensor<4x16x8xf32>
// CHECK-NEXT: moe.embedding
// CHECK-NEXT: moe.get_param @model.layers.1.input_layernorm.weight
// CHECK-NOT: moe.rms_norm
// CHECK: moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight"
// CHECK-NEXT: moe.all_gather
// CHECK-NEXT: moe.rms_norm
// CHECK: moe.get_param @model.norm.weight
// CHECK-NEXT: moe.all_gather
// CHECK-NEXT: moe.get_param @lm_head.weight
// CHECK-NEXT: moe.all_gather
// CHECK-NEXT: moe.rms_norm

// Gradient reductions follow their gradients, in the backward pass, not at
// the optimizer; those of one op keep their order.
// CHECK: %[[HEAD:.*]] = moe.linear_grad_weight
// CHECK-NEXT: moe.reduce_scatter %[[HEAD]]
// CHECK: %{{.*}}, %{{.*}}, %[[W1:.*]], %[[W3:.*]], %[[W2:.*]] = moe.experts_grad
// CHECK-NEXT: moe.reduce_scatter %[[W1]]
// CHECK-NEXT: moe.reduce_scatter %[[W3]]
// CHECK-NEXT: moe.reduce_scatter %[[W2]]
// CHECK: moe.attention_grad
// CHECK: moe.embedding_grad
// CHECK-NEXT: moe.reduce_scatter
// CHECK-NOT: moe.reduce_scatter
// CHECK: moe.global_norm
