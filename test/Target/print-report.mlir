// moe-print-report prints moec's reports at any point of a pipeline.
// RUN: moe-opt %models/tiny.mlir --moe-training-pipeline --moe-print-report="report=memory" -o /dev/null | FileCheck %s --check-prefix=MEMORY
// MEMORY: memory per rank (1 rank, fp32)
// MEMORY-NEXT: parameters: 180800 total, 131648 active per token
// RUN: moe-opt %models/tiny.mlir --moe-set-mesh="mesh=dp=2" --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-propagate-sharding --moe-print-report="report=sharding" --moe-partition --moe-print-report="report=collectives" -o /dev/null | FileCheck %s --check-prefix=SHARDING
// SHARDING: mesh @mesh: dp=2 (2 ranks)
// SHARDING: collectives per rank and step
// SHARDING: all_reduce {dp} 22 ops, 723200 bytes
// Without a mesh there are no collectives to report.
// RUN: moe-opt %models/tiny.mlir --moe-training-pipeline --moe-print-report="report=collectives" -o /dev/null | count 0
// RUN: moe-opt %models/tiny.mlir --moe-training-pipeline --moe-print-report="report=cost cluster=%S/../../hardware/leonardo.yaml" -o /dev/null | FileCheck %s --check-prefix=COST
// COST: cost per step on leonardo-booster

// RUN: not moe-opt %models/tiny.mlir --moe-training-pipeline --moe-print-report="report=speed" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: unknown report 'speed': expected sharding, collectives, memory or cost
// RUN: not moe-opt %models/tiny.mlir --moe-print-report="report=memory" 2>&1 | FileCheck %s --check-prefix=NOSTEP
// NOSTEP: error: no function named 'train_step' to report on
// RUN: not moe-opt %models/tiny.mlir --moe-training-pipeline --moe-print-report="report=cost" 2>&1 | FileCheck %s --check-prefix=NOCLUSTER
// NOCLUSTER: error: the cost report needs a cluster file
// RUN: not moe-opt %models/tiny.mlir --moe-training-pipeline --moe-print-report="report=cost cluster=%S/../moec/Inputs/bad-cluster.yaml" 2>&1 | FileCheck %s --check-prefix=BADCLUSTER
// BADCLUSTER: error: {{.*}}bad-cluster.yaml:1:1: error: missing required key 'nvlink_gbps'
