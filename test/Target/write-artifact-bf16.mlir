// moe-write-artifact on mixed-precision IR (issue 16), as
// moe-mixed-precision writes it: BF16 buffers, working copies naming their
// master, AdamW rounding into the working copy, and (with
// --grad-reduce-dtype=bf16) moe.cast of the BF16 weight gradients.
// RUN: moe-opt %inputs/bf16-step.mlir --moe-plan-memory --moe-write-artifact="output=%t.moebin seed=5" | FileCheck %s --check-prefix=IR
// RUN: moe-run --describe %t.moebin | FileCheck %s
// RUN: moe-opt %inputs/bf16-step-grad-bf16.mlir --moe-plan-memory --moe-write-artifact="output=%t.grad.moebin seed=5" > /dev/null
// RUN: moe-run --describe %t.grad.moebin | FileCheck %s --check-prefix=GRAD

// IR: moe.param @lm_head.weight.bf16 : tensor<256x64xbf16> {kind = #moe.param_kind<working_copy>, master = @lm_head.weight}

// CHECK: artifact version 3.10
// CHECK: %0 'model.embed_tokens.weight' parameter f32[256, 64] init normal(std 0.02) weight_decay
// CHECK-NEXT: %1 'model.embed_tokens.weight.bf16' working copy bf16[256, 64] of %0
// CHECK-NEXT: %2 'model.embed_tokens.weight.exp_avg' optimizer state f32[256, 64] init zeros
// CHECK: %84 'lm_head.weight' parameter f32[256, 64]
// CHECK-NEXT: %85 'lm_head.weight.bf16' working copy bf16[256, 64] of %84
// CHECK: 'embedding.0.0' temporary bf16[8, 64, 64]
// The router's logits, its probabilities and the attention statistics
// stay fp32.
// CHECK: 'attention.7.1' temporary f32[8, 4, 64]
// CHECK: 'linear.{{[0-9]+}}.0' temporary f32[8, 64, 4]
// CHECK-NEXT: 'router.{{[0-9]+}}.0' temporary f32[8, 64, 4]
// CHECK: Embedding(tokens: %88, table: %1)
// CHECK: AdamW(param: %84, grad: %{{[0-9]+}}, exp_avg: %86, exp_avg_sq: %87, lr: %{{[0-9]+}}, grad_scale: %{{[0-9]+}}, step: %90, working: %85)
// CHECK-NOT: Cast(

// GRAD: %[[DW:[0-9]+]] 'linear_grad_weight.40.0' temporary bf16[256, 64]
// GRAD-NEXT: %[[DW32:[0-9]+]] 'cast.41.0' temporary f32[256, 64]
// GRAD: 40 LinearGradWeight(dy: %{{[0-9]+}}, x: %{{[0-9]+}}) -> (dw: %[[DW]])
// GRAD-NEXT: 41 Cast(x: %[[DW]]) -> (y: %[[DW32]])
// GRAD: AdamW(param: %84, grad: %[[DW32]], {{.*}} working: %85)
