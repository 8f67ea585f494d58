// moe-fp8 reads the target's capability record (moe/Runtime/Capabilities.h):
// what the target's backend lacks (a block, GEMM widths) is an error naming
// the capability and what the target has.
// RUN: moe-opt %s --moe-fp8="function=f target=h100 scaling=blockwise" | FileCheck %s --check-prefix=BLOCKWISE
// RUN: not moe-opt %s --moe-fp8="function=f target=h200 scaling=blockwise block=64" 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: moe-opt %s --moe-fp8="function=f target=h100 scaling=tensorwise" | FileCheck %s --check-prefix=HOPPER
// RUN: moe-opt %s --moe-fp8="function=f target=h200 scaling=delayed" | FileCheck %s --check-prefix=DELAYED
// RUN: moe-opt %s --moe-fp8="function=g scaling=tensorwise" | FileCheck %s --check-prefix=CPU
// RUN: not moe-opt %s --moe-fp8="function=g target=h200 scaling=tensorwise" 2>&1 | FileCheck %s --check-prefix=ALIGN
// RUN: moe-opt %s --moe-fp8="function=f target=h100 scaling=tensorwise dispatch=true" 2>&1 | FileCheck %s --check-prefix=DISPATCH
// BLOCKWISE: moe.experts {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 128 : i64} :
// Hopper's block scaling (cuBLASLt) is 1 x 128 and 128 x 128.
// BLOCK: error: 'func.func' op needs fp8 blocks of 64; target 'h200' (cuda backend) lacks it (fp8_block: 128)
// HOPPER: moe.experts {{.*}} {fp8 = #moe.fp8<tensorwise>} :
// DELAYED: moe.experts {{.*}} {fp8 = #moe.fp8<delayed>, fp8_history =
// The CPU emulates FP8 GEMMs of any width.
// CPU-LABEL: func.func @g
// CPU: moe.experts {{.*}} {fp8 = #moe.fp8<tensorwise>} :
// ALIGN: error: 'moe.experts' op needs fp8 GEMMs of hidden 12 and ffn 24; target 'h200' (cuda backend) lacks it (fp8_gemm_alignment: multiples of 16)
// Every target's backend sends FP8 rows: no warning.
// DISPATCH-NOT: warning
// DISPATCH: moe.experts {{.*}}fp8_dispatch
func.func @f(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) -> tensor<8x16xf32> {
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

func.func @g(%x: tensor<8x12xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x24x12xf32>, %w2: tensor<4x12x24xf32>) -> tensor<8x12xf32> {
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x12xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x24x12xf32>, tensor<4x24x12xf32>, tensor<4x12x24xf32>) -> tensor<8x12xf32>
  return %y : tensor<8x12xf32>
}
