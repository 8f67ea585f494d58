// RUN: moe-opt %models/tiny.mlir --moe-set-mesh="mesh=dp=2,tp=2" | FileCheck %s
// RUN: not moe-opt %models/tiny.mlir --moe-set-mesh="mesh=dp=2,sp=2" 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not moe-opt %models/tiny.mlir --moe-set-mesh 2>&1 | FileCheck %s --check-prefix=EMPTY

// CHECK: moe.mesh @mesh(dp = 2, tp = 2)
// CHECK: moe.transformer @tiny
// AXIS: tiny.mlir:{{[0-9]+}}:{{[0-9]+}}: error: mesh: unknown axis 'sp': moec implements dp, fsdp, ep, cp and tp (pipeline stages: --pp)
// EMPTY: error: mesh: {{.+}}
