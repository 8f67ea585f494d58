// moe-write-artifact on a BF16 mixed-precision step: bf16 buffers, working
// copies naming their masters, AdamW's working operand; moe-run --describe
// shows them and the runtime's verifier accepts the artifact.
// RUN: moe-opt %inputs/bf16-step.mlir --moe-plan-memory --moe-write-artifact="output=%t.moebin seed=5" > /dev/null
// RUN: moe-run --describe %t.moebin | FileCheck %s

// CHECK: artifact version 3.1
// CHECK: %0 'model.embed_tokens.weight' parameter f32[32, 16] init normal(std 0.02) weight_decay
// CHECK-NEXT: %1 'model.embed_tokens.weight.bf16' working copy bf16[32, 16] of %0
// CHECK-NEXT: %2 'model.embed_tokens.weight.exp_avg' optimizer state f32[32, 16] init zeros
// CHECK: %49 'lm_head.weight.bf16' working copy bf16[32, 16] of %48
// CHECK: %55 'embedding.0.0' temporary bf16[2, 8, 16]
// CHECK: %63 'attention.7.1' temporary f32[2, 2, 8]
// The gate reads bf16 and writes f32 logits; the router stays f32.
// CHECK: %66 'rms_norm.10.0' temporary bf16[2, 8, 16]
// CHECK-NEXT: %67 'linear.11.0' temporary f32[2, 8, 2]
// CHECK-NEXT: %68 'router.12.0' temporary f32[2, 8, 2]
// CHECK: %75 'linear.17.0' temporary bf16[2, 8, 32]
// CHECK: %83 'linear_grad_weight.25.0' temporary f32[32, 16]
// CHECK: 11 Linear(x: %66, w: %29) -> (y: %67)
// CHECK-NEXT: 12 Router(logits: %67)
// CHECK: CrossEntropy(
// CHECK: AdamW(param: %0, {{.*}}, working: %1)
// CHECK: AdamW(param: %48, {{.*}}, working: %49)

// A working copy must name a master: the dialect refuses one without it
// before the writer sees it (test/Dialect/MoE/invalid.mlir).
