// moe-write-artifact on a BF16 mixed-precision step (the tiny model as
// moe-mixed-precision lays it out): bf16 buffers, working copies naming
// their masters, AdamW's working operand; moe-run --describe shows them and
// the runtime's verifier accepts the artifact.
// RUN: moe-opt %inputs/bf16-step.mlir --moe-plan-memory --moe-write-artifact="output=%t.moebin seed=5" > /dev/null
// RUN: moe-run --describe %t.moebin | FileCheck %s

// CHECK: artifact version 3.1
// CHECK: %0 'model.embed_tokens.weight' parameter f32[256, 64] init normal(std 0.02) weight_decay
// CHECK-NEXT: %1 'model.embed_tokens.weight.bf16' working copy bf16[256, 64] of %0
// CHECK-NEXT: %2 'model.embed_tokens.weight.exp_avg' optimizer state f32[256, 64] init zeros
// CHECK: %85 'lm_head.weight.bf16' working copy bf16[256, 64] of %84
// Activations bf16, the attention lse f32.
// CHECK: %91 'embedding.0.0' temporary bf16[8, 64, 64]
// CHECK: %98 'attention.7.0' temporary bf16[8, 64, 64]
// CHECK-NEXT: %99 'attention.7.1' temporary f32[8, 4, 64]
// The gate reads bf16 and writes f32 logits; the router stays f32.
// CHECK: %118 'rms_norm.25.0' temporary bf16[8, 64, 64]
// CHECK-NEXT: %119 'linear.26.0' temporary f32[8, 64, 4]
// CHECK-NEXT: %120 'router.27.0' temporary f32[8, 64, 4]
// Weight gradients f32.
// CHECK: %135 'linear_grad_weight.40.0' temporary f32[256, 64]
// CHECK: 26 Linear(x: %118, w: %65) -> (y: %119)
// CHECK-NEXT: 27 Router(logits: %119)
// CHECK: AdamW(param: %0, {{.*}}, working: %1)
// CHECK: AdamW(param: %84, {{.*}}, working: %85)
