// RUN: moe-opt %s --split-input-file --moe-fp8="function=f" --verify-diagnostics | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-fp8="function=f scaling=tensorwise" --verify-diagnostics | FileCheck %s --check-prefix=TENSORWISE
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="scaling=blockwise block=32" --moe-autodiff | FileCheck %s --check-prefix=VJP
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="dispatch=true" --moe-autodiff | FileCheck %s --check-prefix=DISPATCH
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f scaling=rowwise" 2>&1 | FileCheck %s --check-prefix=SCALING
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f gemms=linear" 2>&1 | FileCheck %s --check-prefix=GEMMS
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f block=0" 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="scaling=delayed amax-history=8" --moe-autodiff --moe-optimizer | FileCheck %s --check-prefix=DELAYED
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f scaling=delayed amax-history=0" 2>&1 | FileCheck %s --check-prefix=HISTORY
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="target=a100" 2>&1 | FileCheck %s --check-prefix=A100
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="gemms=none dispatch=true block=64" | FileCheck %s --check-prefix=WIRE
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f gemms=none" 2>&1 | FileCheck %s --check-prefix=NOTHING
// RUN: not moe-opt %s --split-input-file --moe-fp8="function=f target=v100" 2>&1 | FileCheck %s --check-prefix=TARGET

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
// SCALING: error: unknown fp8 scaling 'rowwise': expected tensorwise, blockwise or delayed
// GEMMS: error: 'func.func' op fp8 for the 'linear' GEMMs is not supported: choose 'experts' or 'none'
// BLOCK: error: 'func.func' op expected an fp8 block in [1, 65536], found 0
// Delayed scaling: one amax history per expert layer, [E, 9 GEMM inputs,
// this step + 8 past steps], read and updated by the layer's forward and
// backward, and moved on by the optimizer step.
// DELAYED: moe.param @model.layers.1.block_sparse_moe.experts.fp8_amax_history : tensor<4x9x9xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>, no_weight_decay}
// DELAYED: moe.experts {{.*}} {fp8 = #moe.fp8<delayed>, fp8_history = @model.layers.1.block_sparse_moe.experts.fp8_amax_history}
// DELAYED: moe.experts_grad {{.*}} {fp8 = #moe.fp8<delayed>, fp8_history = @model.layers.1.block_sparse_moe.experts.fp8_amax_history}
// DELAYED: moe.adamw_update
// DELAYED: moe.fp8_amax_update @model.layers.1.block_sparse_moe.experts.fp8_amax_history
// DELAYED-NEXT: return
// HISTORY: error: 'func.func' op expected an fp8 amax history of [1, 65536] steps, found 0
// The A100 has no FP8 tensor cores: the GEMMs stay in full precision and
// the tokens travel in FP8.
// A100: warning: target 'a100' (sm_80) has no fp8 tensor cores: the expert GEMMs stay in full precision, and fp8 carries only the expert token dispatch
// A100: moe.experts {{.*}} {fp8_block = 128 : i64, fp8_dispatch} :
// WIRE: moe.experts {{.*}} {fp8_block = 64 : i64, fp8_dispatch} :
// NOTHING: error: 'func.func' op has nothing to run in fp8: no GEMMs and no dispatch
// TARGET: error: unknown target 'v100': expected cpu, a100, h100 or h200
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
