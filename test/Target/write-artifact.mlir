// moe-write-artifact writes the bytes moec -o writes, and leaves the IR.
// RUN: moec %models/tiny.mlir --mesh tp=2 --seed 5 -o %t.moec.moebin
// The passes moec runs for --mesh, by hand.
// RUN: moe-opt %models/tiny.mlir --moe-set-mesh="mesh=tp=2" --moe-expand-transformer --moe-fuse-linear-cross-entropy --moe-count-expert-loads --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-partition --moe-schedule-collectives --moe-bucket-reductions --moe-save-expert-activations --moe-fuse-gemm-epilogues --moe-plan-memory --moe-write-artifact="output=%t.same.moebin seed=5" | FileCheck %s --check-prefix=IR
// RUN: cmp %t.moec.moebin %t.same.moebin
// IR: func.func @train_step
// IR-SAME: moe.arena_bytes

// RUN: not moe-opt %models/tiny.mlir --moe-write-artifact 2>&1 | FileCheck %s --check-prefix=NOOUTPUT
// NOOUTPUT: error: moe-write-artifact needs an output file
// RUN: not moe-opt %models/tiny.mlir --moe-write-artifact="output=%t.missing/dir/x.moebin" 2>&1 | FileCheck %s --check-prefix=UNWRITABLE
// UNWRITABLE: error: cannot open output file '{{.*}}missing/dir/x.moebin'
// RUN: not moe-opt %models/tiny.mlir --moe-write-artifact="output=%t.x.moebin" 2>&1 | FileCheck %s --check-prefix=NOSTEP
// NOSTEP: error: no function named 'train_step' to write as the training step
