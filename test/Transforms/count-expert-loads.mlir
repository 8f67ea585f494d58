// RUN: moe-opt %s --split-input-file --moe-count-expert-loads | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-count-expert-loads="target=h100" | FileCheck %s --check-prefix=GPU

// A router without a counter gets one, named after its gate weight and
// declared with the parameters; a router that balances a bias keeps its
// own. The CUDA backend has no counters: GPU targets are left as they are.
moe.param @l0.gate.weight : tensor<4x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
moe.param @l1.gate.weight : tensor<4x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
moe.param @l1.gate.bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>}
moe.param @l1.gate.load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
// CHECK: moe.param @l0.gate.tokens_per_expert : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>, no_weight_decay}
// CHECK-LABEL: func.func @forward
// CHECK: %{{.*}}, %{{.*}}, %[[IDS0:.*]] = moe.router
// CHECK-NEXT: moe.expert_load %[[IDS0]] {load = @l0.gate.tokens_per_expert} : tensor<2x4x2xi32>
// CHECK: %{{.*}}, %{{.*}}, %[[IDS1:.*]] = moe.router
// CHECK-NEXT: moe.expert_load %[[IDS1]] {bias = @l1.gate.bias, bias_update_rate = 1.000000e-03 : f32, load = @l1.gate.load}
// CHECK-NOT: moe.expert_load
// GPU-NOT: tokens_per_expert
// GPU: moe.expert_load %{{.*}} {bias = @l1.gate.bias
// GPU-NOT: moe.expert_load
func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x4xf32> {
  %w0 = moe.get_param @l0.gate.weight : tensor<4x8xf32>
  %g0 = moe.linear %x, %w0 : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %p0, %r0, %i0 = moe.router %g0 {top_k = 2} : (tensor<2x4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  %w1 = moe.get_param @l1.gate.weight : tensor<4x8xf32>
  %b1 = moe.get_param @l1.gate.bias : tensor<4xf32>
  %g1 = moe.linear %x, %w1 : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %p1, %r1, %i1 = moe.router %g1 bias %b1 {top_k = 2, scoring = #moe.scoring<sigmoid>} : (tensor<2x4x4xf32>, tensor<4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  moe.expert_load %i1 {load = @l1.gate.load, bias = @l1.gate.bias, bias_update_rate = 1.0e-3 : f32} : tensor<2x4x2xi32>
  return %p1 : tensor<2x4x4xf32>
}

// -----

// A router whose logits come from no named gate weight: an ordinal name.
// CHECK: moe.param @router.0.tokens_per_expert : tensor<4xf32>
// CHECK: moe.expert_load %{{.*}} {load = @router.0.tokens_per_expert}
func.func @forward(%logits: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %p, %w, %i = moe.router %logits {top_k = 1} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x1xf32>, tensor<8x1xi32>)
  return %p : tensor<8x4xf32>
}
