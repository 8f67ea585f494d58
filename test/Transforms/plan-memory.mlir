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

// Parameters live outside the arena; a tensor only reuses bytes of tensors
// dead when it is born (the norm takes the bytes of %h, which its operand
// %g outlived); offsets are 64-byte aligned (the 4-byte constant takes 64).
moe.param @up : tensor<8x4xf32> {init = #moe.init<zeros>}
// CHECK-LABEL: func.func @chain
// CHECK-SAME: moe.arena_bytes = 256 : i64, moe.peak_live_bytes = 196 : i64
func.func @chain(%x: tensor<4x4xf32>) -> tensor<f32> {
  // CHECK: moe.get_param @up : tensor<8x4xf32>
  %u = moe.get_param @up : tensor<8x4xf32>
  // CHECK: moe.constant {{.*}} {moe.offsets = array<i64: 0>} : tensor<f32>
  %s = moe.constant 1.0 : tensor<f32>
  // CHECK: moe.linear {{.*}} {moe.offsets = array<i64: 64>}
  %h = moe.linear %x, %u : (tensor<4x4xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  // CHECK: moe.linear_grad_input {{.*}} {moe.offsets = array<i64: 192>}
  %g = moe.linear_grad_input %h, %u : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  // CHECK: moe.global_norm {{.*}} {moe.offsets = array<i64: 64>}
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

// -----

// An arena past 2^56 bytes (64 PiB) is refused, naming the tensor that
// takes it there: 65 live tensors of 2^50 bytes (each within the dialect's
// 2^48 elements).
func.func @chain() -> (tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>) {
  %c0 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c1 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c2 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c3 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c4 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c5 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c6 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c7 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c8 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c9 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c10 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c11 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c12 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c13 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c14 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c15 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c16 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c17 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c18 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c19 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c20 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c21 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c22 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c23 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c24 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c25 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c26 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c27 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c28 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c29 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c30 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c31 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c32 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c33 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c34 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c35 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c36 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c37 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c38 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c39 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c40 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c41 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c42 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c43 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c44 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c45 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c46 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c47 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c48 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c49 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c50 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c51 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c52 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c53 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c54 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c55 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c56 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c57 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c58 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c59 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c60 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c61 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c62 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  %c63 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  // expected-error @+1 {{'moe.constant' op result 0 ('tensor<16777216x16777216xf32>') takes the arena of 'chain' past 2^56 bytes (64 PiB)}}
  %c64 = moe.constant 0.0 : tensor<16777216x16777216xf32>
  return %c0, %c1, %c2, %c3, %c4, %c5, %c6, %c7, %c8, %c9, %c10, %c11, %c12, %c13, %c14, %c15, %c16, %c17, %c18, %c19, %c20, %c21, %c22, %c23, %c24, %c25, %c26, %c27, %c28, %c29, %c30, %c31, %c32, %c33, %c34, %c35, %c36, %c37, %c38, %c39, %c40, %c41, %c42, %c43, %c44, %c45, %c46, %c47, %c48, %c49, %c50, %c51, %c52, %c53, %c54, %c55, %c56, %c57, %c58, %c59, %c60, %c61, %c62, %c63, %c64 : tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>, tensor<16777216x16777216xf32>
}
