// RUN: moec %s -o %t.moebin --report=memory | FileCheck %s --check-prefix=MEMORY
// RUN: test -s %t.moebin
// RUN: moec %s --emit=mlir -o - | FileCheck %s --check-prefix=IR
// RUN: moec %s -o %t2.moebin --mlir-print-ir-after-all 2>&1 | FileCheck %s --check-prefix=PRINT
// RUN: moec %s --emit=mlir -o - --pass-pipeline="builtin.module(moe-expand-transformer)" | FileCheck %s --check-prefix=EXPANDED

// MEMORY: memory per rank (1 rank, fp32)
// 6544 = embeddings and head 2*32*16 + final norm 16 + 2 attention blocks
// 2*(16*16*2 + 8*16*2 + 2*16) + dense MLP 3*16*16 + gate 4*16 + experts
// 4*3*16*16; the active count holds 2 of the 4 experts.
// MEMORY-NEXT: parameters: 6544 total, 5008 active per token
// MEMORY-NEXT: parameters 0.02 MiB
// MEMORY-NEXT: optimizer state (AdamW m, v) 0.05 MiB
// MEMORY: arena: activations and gradients
// MEMORY: model FLOPs per step:

// IR-LABEL: func.func @train_step(%{{.*}}: tensor<2x8xi32>, %{{.*}}: tensor<2x8xi32>, %{{.*}}: tensor<i32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
// IR-SAME: moe.arena_bytes
// IR: moe.experts_grad
// IR: moe.adamw_update @lm_head.weight, @lm_head.weight.exp_avg, @lm_head.weight.exp_avg_sq

// PRINT: IR Dump After ExpandTransformer (moe-expand-transformer)
// PRINT: IR Dump After Autodiff (moe-autodiff)
// PRINT: IR Dump After Optimizer (moe-optimizer)
// PRINT: IR Dump After PlanMemory (moe-plan-memory)

// EXPANDED: func.func @forward
// EXPANDED-NOT: moe.adamw_update

module {
  moe.transformer @small {vocab = 32, hidden = 16, layers = 2, heads = 2,
                          kv_heads = 1, experts = 4, top_k = 2, ffn = 16,
                          seq = 8, batch = 2, dense_layers = array<i64: 0>}
}
