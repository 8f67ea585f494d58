// RUN: moe-opt %s --split-input-file --moe-optimizer --verify-diagnostics | FileCheck %s

// Two weights, one of them a norm (not decayed): moments are declared after
// each weight, the step gets a step argument and returns (loss, norm, lr).
moe.adamw_config {lr = 1.0e-3 : f32, min_lr = 1.0e-4 : f32, warmup = 10,
                  decay_steps = 100, beta1 = 0.8 : f32, beta2 = 0.9 : f32,
                  eps = 1.0e-6 : f32, weight_decay = 0.05 : f32,
                  max_grad_norm = 2.0 : f32}
moe.param @w : tensor<4x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
moe.param @norm : tensor<8xf32> {init = #moe.init<ones>, no_weight_decay}
// CHECK: moe.param @w : tensor<4x8xf32>
// CHECK-NEXT: moe.param @w.exp_avg : tensor<4x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
// CHECK-NEXT: moe.param @w.exp_avg_sq : tensor<4x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
// CHECK-NEXT: moe.param @norm : tensor<8xf32>
// CHECK-NEXT: moe.param @norm.exp_avg : tensor<8xf32>
// CHECK-NEXT: moe.param @norm.exp_avg_sq : tensor<8xf32>
// CHECK: func.func @train_step(%{{.*}}: tensor<f32>, %{{.*}}: tensor<4x8xf32>, %{{.*}}: tensor<8xf32>, %[[STEP:.*]]: tensor<i32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
// CHECK: %[[NORM:.*]] = moe.global_norm %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<f32>
// CHECK: %[[CLIP:.*]] = moe.clip_coefficient %[[NORM]] {max_norm = 2.000000e+00 : f32}
// CHECK: %[[LR:.*]] = moe.learning_rate %[[STEP]] {decay_steps = 100 : i64, min = 9.99999974E-5 : f32, peak = 1.000000e-03 : f32, warmup = 10 : i64}
// CHECK: moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %{{.*}}, %[[LR]], %[[CLIP]], %[[STEP]] {beta1 = 8.000000e-01 : f32, beta2 = 0.899999976 : f32, eps = 9.99999997E-7 : f32, weight_decay = 5.000000e-02 : f32}
// CHECK: moe.adamw_update @norm, @norm.exp_avg, @norm.exp_avg_sq, {{.*}} weight_decay = 0.000000e+00 : f32}
// CHECK: return %{{.*}}, %[[NORM]], %[[LR]] : tensor<f32>, tensor<f32>, tensor<f32>
func.func @forward_backward(%loss: tensor<f32>, %gw: tensor<4x8xf32>, %gn: tensor<8xf32>)
    -> (tensor<f32>, tensor<4x8xf32> {moe.grad_of = @w}, tensor<8xf32> {moe.grad_of = @norm}) {
  return %loss, %gw, %gn : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// expected-error @+1 {{result 1 is not tagged with moe.grad_of}}
func.func @forward_backward(%loss: tensor<f32>, %g: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) {
  return %loss, %g : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{result 1 is the gradient of @missing, which is not a moe.param}}
func.func @forward_backward(%loss: tensor<f32>, %g: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32> {moe.grad_of = @missing}) {
  return %loss, %g : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{expected the loss as first result}}
func.func @forward_backward() {
  return
}

// -----

// expected-error @+1 {{has no parameter gradients to apply}}
func.func @forward_backward(%loss: tensor<f32>) -> tensor<f32> {
  return %loss : tensor<f32>
}

// -----

// A router's load counter ends the step after the AdamW updates: the bias
// moves by the counter's rate, a counter without a bias is only cleared.
moe.param @w : tensor<4x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
moe.param @bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>}
moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
moe.param @load2 : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
// CHECK: moe.param @load2
// CHECK: moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq
// CHECK-NEXT: moe.expert_load_update {bias = @bias, load = @load, rate = 1.000000e-03 : f32}
// CHECK-NEXT: moe.expert_load_update {load = @load2}
// CHECK-NEXT: return
func.func @forward_backward(%loss: tensor<f32>, %gw: tensor<4x8xf32>, %ids: tensor<8x2xi32>)
    -> (tensor<f32>, tensor<4x8xf32> {moe.grad_of = @w}) {
  moe.expert_load %ids {load = @load, bias = @bias, bias_update_rate = 1.0e-3 : f32} : tensor<8x2xi32>
  moe.expert_load %ids {load = @load2} : tensor<8x2xi32>
  return %loss, %gw : tensor<f32>, tensor<4x8xf32>
}
