// RUN: moe-opt %s --split-input-file --moe-autodiff --verify-diagnostics | FileCheck %s

// A linear layer under a cross-entropy: the seed, the loss gradient, both
// linear gradients, and the parameter gradient tagged with its symbol.
moe.param @w : tensor<16x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {moe.grad_of = @w})
func.func @forward(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %w = moe.get_param @w : tensor<16x8xf32>
  %logits = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %ce = moe.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  // CHECK: %[[CE:.*]] = moe.cross_entropy
  // CHECK: %[[ONE:.*]] = moe.constant 1.000000e+00 : tensor<f32>
  // CHECK: %[[DL:.*]] = moe.cross_entropy_grad %[[ONE]]
  // CHECK: moe.linear_grad_input %[[DL]]
  // CHECK: %[[DW:.*]] = moe.linear_grad_weight %[[DL]], %{{.*}} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>) -> tensor<16x8xf32>
  // CHECK: return %[[CE]], %[[DW]]
  return %ce : tensor<f32>
}

// -----

// A parameter read twice (tied use) sums its gradients; a residual sums
// the gradients reaching its operand from both paths.
moe.param @norm : tensor<8xf32> {init = #moe.init<ones>, no_weight_decay}
moe.param @head : tensor<16x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
// CHECK-LABEL: func.func @forward_backward
func.func @forward(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %n1 = moe.get_param @norm : tensor<8xf32>
  %a = moe.rms_norm %x, %n1 {epsilon = 1.0e-5 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %r = moe.add %a, %x : tensor<2x4x8xf32>
  %n2 = moe.get_param @norm : tensor<8xf32>
  %b = moe.rms_norm %r, %n2 {epsilon = 1.0e-5 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h = moe.get_param @head : tensor<16x8xf32>
  %l = moe.linear %b, %h : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %ce = moe.cross_entropy %l, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  // CHECK: %[[DX2:.*]], %[[DN2:.*]] = moe.rms_norm_grad
  // CHECK: %[[DX1:.*]], %[[DN1:.*]] = moe.rms_norm_grad %[[DX2]]
  // CHECK: %[[DNORM:.*]] = moe.add %[[DN2]], %[[DN1]] : tensor<8xf32>
  // CHECK: return %{{.*}}, %[[DNORM]], %{{.*}} : tensor<f32>, tensor<8xf32>, tensor<16x8xf32>
  return %ce : tensor<f32>
}

// -----

// The router receives gradient from the experts (weights) and from the
// load-balancing loss (probs); a weight the loss ignores gets zeros.
moe.param @unused : tensor<4xf32> {init = #moe.init<ones>}
// CHECK-LABEL: func.func @forward_backward
func.func @forward(%logits: tensor<8x4xf32>, %x: tensor<8x16xf32>,
                   %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) -> tensor<f32> {
  %p, %w, %i = moe.router %logits {top_k = 2} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  %aux = moe.aux_loss %p {top_k = 2} : (tensor<8x4xf32>) -> tensor<f32>
  %loss = moe.weighted_sum %aux {coefficients = array<f32: 0.5>} : (tensor<f32>) -> tensor<f32>
  // CHECK: %[[ONE:.*]] = moe.constant 1.000000e+00
  // CHECK: %[[SEED:.*]] = moe.weighted_sum %[[ONE]] {coefficients = array<f32: 5.000000e-01>}
  // CHECK: %[[DP:.*]] = moe.aux_loss_grad %[[SEED]]
  // CHECK: %[[ZW:.*]] = moe.constant 0.000000e+00 : tensor<8x2xf32>
  // CHECK: moe.router_grad %[[ZW]], %{{.*}}, %[[DP]] {top_k = 2 : i64}
  // CHECK: %[[Z:.*]] = moe.constant 0.000000e+00 : tensor<4xf32>
  // CHECK: return %{{.*}}, %[[Z]] : tensor<f32>, tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

func.func private @opaque(tensor<8xf32>) -> tensor<f32>
func.func @forward(%x: tensor<8xf32>) -> tensor<f32> {
  // expected-error @+1 {{'func.call' op is on the path to the loss but has no gradient rule}}
  %y = func.call @opaque(%x) : (tensor<8xf32>) -> tensor<f32>
  return %y : tensor<f32>
}

// -----

// expected-error @+1 {{expected a function returning one tensor<f32> loss}}
func.func @forward(%x: tensor<8xf32>) -> tensor<8xf32> {
  return %x : tensor<8xf32>
}

// -----

// expected-error @+1 {{no function named 'forward' to differentiate}}
module {
  func.func @other() {
    return
  }
}

// -----

// Scaled RoPE's gradient rotates back with the same scaling; attention's
// gradient keeps its softmax scale factor.
moe.param @wq : tensor<8x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
moe.param @head : tensor<16x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
// CHECK-LABEL: func.func @forward_backward
func.func @forward(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %wq = moe.get_param @wq : tensor<8x8xf32>
  %q = moe.linear %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %qr = moe.rope %q {num_heads = 2, theta = 1.0e4 : f32, scaling = #moe.rope_scaling<linear, factor = 2.0>} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %o, %lse = moe.attention %qr, %qr, %qr {num_heads = 2, num_kv_heads = 2, scale_factor = 1.5 : f32}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  %h = moe.get_param @head : tensor<16x8xf32>
  %l = moe.linear %o, %h : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %ce = moe.cross_entropy %l, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  // CHECK: moe.attention_grad {{.*}} {num_heads = 2 : i64, num_kv_heads = 2 : i64, scale_factor = 1.500000e+00 : f32}
  // CHECK: moe.rope_grad {{.*}} {num_heads = 2 : i64, scaling = #moe.rope_scaling<linear, factor = 2.000000e+00>, theta = 1.000000e+04 : f32}
  return %ce : tensor<f32>
}
