// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-rematerialize="budget=6750000" --moe-plan-memory | FileCheck %s
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-rematerialize="budget=6650000" --moe-plan-memory | FileCheck %s --check-prefix=TIGHTER
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-rematerialize="budget=8250000" --moe-plan-memory | FileCheck %s --check-prefix=FITS
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-rematerialize="budget=6000000" 2>&1 | FileCheck %s --check-prefix=TOO-SMALL
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-rematerialize="budget=3000000" 2>&1 | FileCheck %s --check-prefix=WEIGHTS
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-save-expert-activations --moe-rematerialize="budget=6750000" --moe-plan-memory | FileCheck %s --check-prefix=DROP-HIDDEN
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-save-expert-activations --moe-rematerialize="budget=8250000" --moe-plan-memory | FileCheck %s --check-prefix=KEEP-HIDDEN
// RUN: moe-opt %models/tiny.mlir --moe-set-mesh="mesh=tp=2" --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-rematerialize="budget=4350000" --moe-plan-memory | FileCheck %s --check-prefix=REGATHER

// The tiny model's step needs 7.62 MiB (2.07 MiB of weights and moments,
// 1.52 MiB of kernel workspace, a 3.78 MiB arena). Under a 6.75 MB budget the
// cheapest activations per byte
// are recomputed right before the backward pass reads them: norms, the
// SwiGLU product, the embedding, and a norm of the recomputed embedding,
// which reads it from its recomputation; none of them has GEMM FLOPs. The
// arena shrinks under what the budget leaves.
// CHECK: func.func @train_step
// CHECK-SAME: moe.arena_bytes = [[ARENA:[0-9]+]]
// CHECK-SAME: moe.memory_budget = 6750000
// CHECK-SAME: moe.recompute_flops = 0.000000e+00
// CHECK: %[[EMBEDDING:.*]] = moe.embedding
// CHECK: moe.linear_grad_weight
// CHECK: moe.swiglu {{.*}}moe.recomputed
// CHECK: %[[AGAIN:.*]] = moe.embedding %arg0, %{{.*}} {moe.offsets = {{.*}}, moe.recomputed}
// CHECK-NEXT: moe.rms_norm %[[AGAIN]], {{.*}}moe.recomputed
// The forward's own ops are untouched.
// CHECK-NOT: moe.cross_entropy {{.*}}moe.recomputed

// A tighter budget recomputes attention too (cheap at 64 tokens): the first
// op of the ranking with model FLOPs.
// TIGHTER: func.func @train_step
// TIGHTER-SAME: moe.memory_budget = 6650000
// TIGHTER-NOT: moe.recompute_flops = 0.0
// TIGHTER: moe.attention {{.*}}moe.recomputed

// A budget the step meets: nothing is recomputed.
// FITS: moe.recompute_flops = 0.000000e+00
// FITS-NOT: moe.recomputed}

// TOO-SMALL: error: 'func.func' op does not fit the memory budget even when every activation is recomputed: its arena needs 2.33 MiB (3.78 MiB without recomputation), the budget leaves 2.13 MiB after parameters, optimizer state, inputs and kernel workspace
// WEIGHTS: error: 'func.func' op does not fit the memory budget of 2.86 MiB: parameters, optimizer state, inputs and kernel workspace alone need 3.59 MiB

// The experts' saved up projections (1 MiB) are a candidate of their own:
// under 6.75 MB they are dropped, and the gradient recomputes them (two of
// the experts' three GEMMs, the recompute FLOPs the step records); the
// experts op itself runs once. Under 8.25 MB the cheaper norms and products
// make the room and the projections stay.
// DROP-HIDDEN: func.func @train_step
// DROP-HIDDEN-NOT: moe.recompute_flops = 0.0
// DROP-HIDDEN: moe.experts {{.*}} -> tensor<8x64x64xf32>
// DROP-HIDDEN-NOT: moe.experts {{.*}}moe.recomputed
// DROP-HIDDEN: moe.experts_grad {{.*}}, tensor<4x64x128xf32>) -> (
// KEEP-HIDDEN: %{{.*}}, %[[HIDDEN:.*]] = moe.experts
// KEEP-HIDDEN: moe.experts_grad {{.*}}, %[[HIDDEN]] {

// Under tp the weight gradients read the forward's gathered (sequence
// parallel) inputs; a budget gathers one of them again in the backward (a
// candidate of no FLOPs) instead of keeping it from the forward.
// REGATHER: func.func @train_step
// REGATHER: moe.all_gather {{.*}}moe.recomputed} : (tensor<8x32x64xf32>) -> tensor<8x64x64xf32>
