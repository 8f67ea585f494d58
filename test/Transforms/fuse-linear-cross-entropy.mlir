// The LM head and its cross-entropy become one op on the forward function.
// RUN: moe-opt %s --split-input-file --moe-fuse-linear-cross-entropy | FileCheck %s
// Its VJP is the fused gradient: no logits, no logits' gradient.
// RUN: moe-opt %S/Inputs/fuse-head.mlir --moe-expand-transformer --moe-fuse-linear-cross-entropy --moe-autodiff | FileCheck %s --check-prefix=GRAD
// Split tokens combine their sums and counts over the data ranks.
// RUN: moe-opt %S/Inputs/fuse-head.mlir --moe-set-mesh="mesh=dp=2" --moe-expand-transformer --moe-fuse-linear-cross-entropy --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition | FileCheck %s --check-prefix=DP
// Mixed precision keeps the log-sum-exp in fp32.
// RUN: moe-opt %S/Inputs/fuse-head.mlir --pass-pipeline='builtin.module(moe-expand-transformer,moe-fuse-linear-cross-entropy,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{precision=bf16})' | FileCheck %s --check-prefix=BF16
// GPU targets' backends have no fused kernel: the pair stays.
// RUN: moe-opt %s --split-input-file --moe-fuse-linear-cross-entropy="target=h100" | FileCheck %s --check-prefix=GPU
// RUN: not moe-opt %s --split-input-file --moe-fuse-linear-cross-entropy="target=tpu" 2>&1 | FileCheck %s --check-prefix=TARGET

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[H:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<16x8xf32>, %[[T:.*]]: tensor<2x4xi32>)
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}} = moe.linear_cross_entropy %[[H]], %[[W]], %[[T]] : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xf32>)
// CHECK-NEXT: return %[[LOSS]]
// GPU-LABEL: func.func @forward
// GPU: moe.linear
// GPU: moe.cross_entropy
// TARGET: error: unknown target 'tpu': expected cpu, a100, h100 or h200
func.func @forward(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %logits = moe.linear %h, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %ce = moe.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %ce : tensor<f32>
}

// -----

// Logits that something else reads must exist: nothing to fuse.
// CHECK-LABEL: func.func @forward
// CHECK: %[[LOGITS:.*]] = moe.linear
// CHECK: moe.cross_entropy %[[LOGITS]]
// CHECK: return {{.*}}, %[[LOGITS]]
// CHECK-NOT: moe.linear_cross_entropy
func.func @forward(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x16xf32>) {
  %logits = moe.linear %h, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %ce = moe.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %ce, %logits : tensor<f32>, tensor<2x4x16xf32>
}

// -----

// Logits from anything but a linear stay as they are.
// CHECK-LABEL: func.func @forward
// CHECK: moe.cross_entropy %arg0
// CHECK-NOT: moe.linear_cross_entropy
func.func @forward(%logits: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %ce = moe.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %ce : tensor<f32>
}

// GRAD-LABEL: func.func @forward_backward
// GRAD-NOT: tensor<2x4x32xf32>
// GRAD: %[[LOSS:.*]], %[[LSE:.*]] = moe.linear_cross_entropy %[[NORMED:[^,]*]], %[[HEAD:[^,]*]], %{{[^ ]*}} : (tensor<2x4x16xf32>, tensor<32x16xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xf32>)
// GRAD: moe.linear_cross_entropy_grad %{{[^,]*}}, %[[NORMED]], %[[HEAD]], %{{[^,]*}}, %[[LSE]] : (tensor<f32>, tensor<2x4x16xf32>, tensor<32x16xf32>, tensor<2x4xi32>, tensor<2x4xf32>) -> (tensor<2x4x16xf32>, tensor<32x16xf32>)
// GRAD-NOT: moe.cross_entropy
// GRAD-NOT: tensor<2x4x32xf32>

// DP-LABEL: func.func @train_step
// DP: moe.linear_cross_entropy {{.*}} {token_axes = ["dp"]} : (tensor<1x4x16xf32>, tensor<32x16xf32>, tensor<1x4xi32>) -> (tensor<f32>, tensor<1x4xf32>)
// DP: moe.linear_cross_entropy_grad {{.*}} {token_axes = ["dp"]} : (tensor<f32>, tensor<1x4x16xf32>, tensor<32x16xf32>, tensor<1x4xi32>, tensor<1x4xf32>) -> (tensor<1x4x16xf32>, tensor<32x16xf32>)
// DP: moe.all_reduce

// BF16-LABEL: func.func @train_step
// BF16: moe.linear_cross_entropy {{.*}} : (tensor<2x4x16xbf16>, tensor<32x16xbf16>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xf32>)
// BF16: moe.linear_cross_entropy_grad {{.*}} : (tensor<f32>, tensor<2x4x16xbf16>, tensor<32x16xbf16>, tensor<2x4xi32>, tensor<2x4xf32>) -> (tensor<2x4x16xbf16>, tensor<32x16xf32>)
