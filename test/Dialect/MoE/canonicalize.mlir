// RUN: moe-opt %s --canonicalize --cse | FileCheck %s

// moe.constant folds to its splat value, so identical constants merge and
// unused ones disappear.
// CHECK-LABEL: func.func @constants
// CHECK-NEXT: %[[C:.*]] = moe.constant 1.000000e+00 : tensor<f32>
// CHECK-NEXT: %[[S:.*]] = moe.weighted_sum %[[C]], %[[C]]
// CHECK-NEXT: return %[[S]]
func.func @constants() -> tensor<f32> {
  %a = moe.constant 1.0 : tensor<f32>
  %b = moe.constant 1.0 : tensor<f32>
  %unused = moe.constant 2.0 : tensor<4xf32>
  %s = moe.weighted_sum %a, %b {coefficients = array<f32: 1.0, 2.0>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}
