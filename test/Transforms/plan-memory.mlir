// RUN: moe-opt %s --split-input-file --moe-plan-memory="function=chain" --verify-diagnostics | FileCheck %s

// A chain of 64-byte tensors needs two slots: each result is live with its
// operand, and a value dead since the previous op gives its bytes back.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: moe.arena_bytes = 128 : i64, moe.peak_live_bytes = 128 : i64
func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> {
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 0>}
  %0 = moe.add %x, %x : tensor<16xf32>
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 64>}
  %1 = moe.add %0, %0 : tensor<16xf32>
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 0>}
  %2 = moe.add %1, %1 : tensor<16xf32>
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 64>}
  %3 = moe.add %2, %2 : tensor<16xf32>
  return %3 : tensor<16xf32>
}

// -----

// Parameters live outside the arena; the largest tensors are placed first;
// a tensor only reuses bytes of tensors dead when it is born; offsets are
// 64-byte aligned.
moe.param @up : tensor<8x4xf32> {init = #moe.init<zeros>}
// CHECK-LABEL: func.func @chain
// CHECK-SAME: moe.arena_bytes = 256 : i64, moe.peak_live_bytes = 196 : i64
func.func @chain(%x: tensor<4x4xf32>) -> tensor<f32> {
  // CHECK: moe.get_param @up : tensor<8x4xf32>
  %u = moe.get_param @up : tensor<8x4xf32>
  // CHECK: moe.constant {{.*}} {moe.offsets = array<i64: 192>} : tensor<f32>
  %s = moe.constant 1.0 : tensor<f32>
  // CHECK: moe.linear {{.*}} {moe.offsets = array<i64: 0>}
  %h = moe.linear %x, %u : (tensor<4x4xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  // CHECK: moe.linear_grad_input {{.*}} {moe.offsets = array<i64: 128>}
  %g = moe.linear_grad_input %h, %u : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  // CHECK: moe.global_norm {{.*}} {moe.offsets = array<i64: 0>}
  %n = moe.global_norm %g, %s : (tensor<4x4xf32>, tensor<f32>) -> tensor<f32>
  return %n : tensor<f32>
}

// -----

// expected-error @+1 {{no function named 'chain' to plan}}
module {
}

// -----

// A step split over two pipeline ranks: each rank runs its own stages' ops
// in its own arena, so values only one rank holds share bytes with those of
// the other (on one rank, the same step needs 192 bytes).
// CHECK-LABEL: func.func @chain
// CHECK-SAME: moe.arena_bytes = 128 : i64, moe.peak_live_bytes = 128 : i64
func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> attributes {moe.pipeline_ranks = 2 : i64} {
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 0>, moe.pipeline_stage = 0 : i64}
  %a = moe.add %x, %x {moe.pipeline_stage = 0 : i64} : tensor<16xf32>
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 0>, moe.pipeline_stage = 1 : i64}
  %b = moe.add %x, %x {moe.pipeline_stage = 1 : i64} : tensor<16xf32>
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 64>, moe.pipeline_stage = 0 : i64}
  %c = moe.add %a, %a {moe.pipeline_stage = 0 : i64} : tensor<16xf32>
  // CHECK: moe.add {{.*}} {moe.offsets = array<i64: 64>, moe.pipeline_stage = 1 : i64}
  %d = moe.add %b, %b {moe.pipeline_stage = 1 : i64} : tensor<16xf32>
  %e = moe.add %c, %c {moe.pipeline_stage = 0 : i64} : tensor<16xf32>
  %f = moe.add %d, %d {moe.pipeline_stage = 1 : i64} : tensor<16xf32>
  return %f : tensor<16xf32>
}
