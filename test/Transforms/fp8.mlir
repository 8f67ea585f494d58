// RUN: moe-opt %s --split-input-file --moe-fp8="function=f" --verify-diagnostics | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-fp8="function=f scaling=tensorwise" --verify-diagnostics | FileCheck %s --check-prefix=TENSORWISE
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="scaling=blockwise block=32" --moe-autodiff | FileCheck %s --check-prefix=VJP
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="dispatch=true" --moe-autodiff | FileCheck %s --check-prefix=DISPATCH
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f scaling=rowwise" 2>&1 | FileCheck %s --check-prefix=SCALING
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f gemms=linear" 2>&1 | FileCheck %s --check-prefix=GEMMS
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f block=0" 2>&1 | FileCheck %s --check-prefix=BLOCK

// The expert GEMMs read FP8: blockwise by default (128-element blocks),
// tensorwise on request; nothing else changes.
// CHECK-LABEL: func.func @f
// CHECK: moe.experts {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 128 : i64}
// TENSORWISE: moe.experts {{.*}} {fp8 = #moe.fp8<tensorwise>} :
// The VJP carries the recipe to the backward GEMMs.
// VJP: moe.experts {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 32 : i64}
// VJP: moe.experts_grad {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 32 : i64}
// FP8 token dispatch travels with the recipe to the backward too.
// DISPATCH: moe.experts {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 128 : i64, fp8_dispatch}
// DISPATCH: moe.experts_grad {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 128 : i64, fp8_dispatch}
// SCALING: error: unknown fp8 scaling 'rowwise': expected tensorwise or blockwise
// GEMMS: error: 'func.func' op fp8 for the 'linear' GEMMs is not supported: choose 'experts'
// BLOCK: error: 'func.func' op expected an fp8 block in [1, 65536], found 0
func.func @f(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) -> tensor<8x16xf32> {
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

// A dense model has no expert GEMMs: asking for FP8 experts is an error.
// expected-error @+1 {{has no expert GEMMs to run in fp8 (a dense model?)}}
func.func @f(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  return %x : tensor<8x16xf32>
}
