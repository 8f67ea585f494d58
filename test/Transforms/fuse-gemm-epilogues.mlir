// Adds fold into the GEMMs that make one of their terms.
// RUN: moe-opt %s --split-input-file --moe-fuse-gemm-epilogues="function=f" | FileCheck %s
// GPU targets' backends have no accumulating GEMMs: the adds stay.
// RUN: moe-opt %s --split-input-file --moe-fuse-gemm-epilogues="function=f target=h100" | FileCheck %s --check-prefix=GPU
// RUN: not moe-opt %s --split-input-file --moe-fuse-gemm-epilogues="function=f target=tpu" 2>&1 | FileCheck %s --check-prefix=TARGET
// On a whole step: the residual adds of the forward and the sums of the
// input gradients of the backward (q, k, v; the residual stream's).
// RUN: moe-opt %S/Inputs/fuse-head.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-fuse-gemm-epilogues | FileCheck %s --check-prefix=STEP
// Under tensor parallelism a row-parallel projection's partial sum reaches
// its add through a collective, so that add stays.
// RUN: moe-opt %S/Inputs/fuse-head.mlir --moe-set-mesh="mesh=tp=2" --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-fuse-gemm-epilogues | FileCheck %s --check-prefix=TP

// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8x8xf32>, %[[R:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[H:.*]] = moe.linear %[[X]], %[[W]], %[[R]] : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[H]]
// GPU-LABEL: func.func @f
// GPU: moe.add
// TARGET: error: unknown target 'tpu': expected cpu, a100, h100 or h200
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %r: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %p = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h = moe.add %r, %p : tensor<2x4x8xf32>
  return %h : tensor<2x4x8xf32>
}

// -----

// Gradient contributions: the later GEMM starts from the earlier one's
// product, and the third from their sum.
// CHECK-LABEL: func.func @f
// CHECK: %[[V:.*]] = moe.linear_grad_input %arg0, %arg3 : (
// CHECK-NEXT: %[[KV:.*]] = moe.linear_grad_input %arg1, %arg4, %[[V]] : (
// CHECK-NEXT: %[[QKV:.*]] = moe.linear_grad_input %arg2, %arg5, %[[KV]] : (
// CHECK-NEXT: return %[[QKV]]
func.func @f(%dv: tensor<2x4x4xf32>, %dk: tensor<2x4x4xf32>, %dq: tensor<2x4x8xf32>,
             %wv: tensor<4x8xf32>, %wk: tensor<4x8xf32>, %wq: tensor<8x8xf32>) -> tensor<2x4x8xf32> {
  %a = moe.linear_grad_input %dv, %wv : (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %b = moe.linear_grad_input %dk, %wk : (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %s = moe.add %a, %b : tensor<2x4x8xf32>
  %c = moe.linear_grad_input %dq, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %t = moe.add %s, %c : tensor<2x4x8xf32>
  return %t : tensor<2x4x8xf32>
}

// -----

// A product read elsewhere must exist; an addend made after the GEMM would
// keep the GEMM's inputs alive longer; BF16 sums round the product first.
// CHECK-LABEL: func.func @f
// CHECK-COUNT-3: moe.add
// CHECK-NOT: moe.linear {{.*}}, {{.*}}, {{.*}} :
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %r: tensor<2x4x8xf32>,
             %n: tensor<8xf32>,
             %xb: tensor<2x4x8xbf16>, %wb: tensor<8x8xbf16>, %rb: tensor<2x4x8xbf16>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16>) {
  %p = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h = moe.add %r, %p : tensor<2x4x8xf32>
  %q = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %later = moe.rms_norm %r, %n {epsilon = 1.0e-5 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %g = moe.add %later, %q : tensor<2x4x8xf32>
  %pb = moe.linear %xb, %wb : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
  %hb = moe.add %rb, %pb : tensor<2x4x8xbf16>
  return %h, %p, %g, %hb : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16>
}

// STEP-LABEL: func.func @train_step
// STEP-NOT: moe.add {{.*}} : tensor<2x4x16xf32>
// STEP: moe.linear {{.*}}, {{.*}}, {{.*}} : (tensor<2x4x16xf32>, tensor<16x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// STEP: moe.linear_grad_input {{.*}}, {{.*}}, {{.*}} : (tensor<2x4x16xf32>, tensor<16x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>

// TP-LABEL: func.func @train_step
// TP: %[[PARTIAL:.*]] = moe.linear {{[^,]*}}, {{[^,]*}} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// TP: %[[SUM:.*]] = moe.reduce_scatter %[[PARTIAL]]
// TP: moe.add {{.*}}%[[SUM]]
