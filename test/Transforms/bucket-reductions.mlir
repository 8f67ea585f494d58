// RUN: moe-opt %s --split-input-file --moe-bucket-reductions="function=f bucket-bytes=1024" | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-bucket-reductions="function=f bucket-bytes=0" | FileCheck %s --check-prefix=OFF

// Reductions over one group whose results are read after the last of them
// go in one message, where the last one was; the others keep their order.
moe.mesh @mesh(dp = 2, tp = 2)
func.func @f(%a: tensor<16xf32>, %b: tensor<4x8xf32>, %c: tensor<8xf32>)
    -> (tensor<16xf32>, tensor<4x8xf32>, tensor<8xf32>) {
  %ra = moe.all_reduce %a {mesh = @mesh, axes = ["dp"]} : tensor<16xf32>
  %d = moe.add %c, %c : tensor<8xf32>
  %rb = moe.all_reduce %b {mesh = @mesh, axes = ["dp"]} : tensor<4x8xf32>
  %rd = moe.all_reduce %d {mesh = @mesh, axes = ["dp"]} : tensor<8xf32>
  return %ra, %rb, %rd : tensor<16xf32>, tensor<4x8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @f
// CHECK-NEXT: %[[D:.*]] = moe.add
// CHECK-NEXT: %[[R:.*]]:3 = moe.reduce_bucket %{{.*}}, %{{.*}}, %[[D]] {axes = ["dp"], mesh = @mesh}
// CHECK-SAME: : (tensor<16xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<16xf32>, tensor<4x8xf32>, tensor<8xf32>)
// CHECK-NEXT: return %[[R]]#0, %[[R]]#1, %[[R]]#2
// OFF-LABEL: func.func @f
// OFF-NOT: moe.reduce_bucket

// -----

// A reduction whose result is read before the next one closes its bucket:
// nothing waits for a later gradient. A bucket of one stays as it was.
moe.mesh @mesh(dp = 2)
func.func @f(%a: tensor<16xf32>, %b: tensor<16xf32>, %c: tensor<16xf32>)
    -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %ra = moe.all_reduce %a {mesh = @mesh, axes = ["dp"]} : tensor<16xf32>
  %s = moe.add %ra, %ra : tensor<16xf32>
  %rb = moe.all_reduce %b {mesh = @mesh, axes = ["dp"]} : tensor<16xf32>
  %rc = moe.all_reduce %c {mesh = @mesh, axes = ["dp"]} : tensor<16xf32>
  return %s, %rb, %rc : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}
// CHECK-LABEL: func.func @f
// CHECK-NEXT: %[[RA:.*]] = moe.all_reduce %arg0
// CHECK-NEXT: moe.add %[[RA]], %[[RA]]
// CHECK-NEXT: moe.reduce_bucket %arg1, %arg2

// -----

// Buckets are per group, kind and element type, and hold at most
// bucket-bytes of inputs (1024 here: the third 512-byte input opens a new
// bucket). A reduce-scatter along another dimension than 0 stays alone.
moe.mesh @mesh(dp = 2, tp = 2)
func.func @f(%a: tensor<128xf32>, %b: tensor<128xf32>, %c: tensor<128xf32>,
             %t: tensor<8xf32>, %u: tensor<8xf32>, %h: tensor<8xbf16>,
             %k: tensor<8xbf16>, %s: tensor<4x8xf32>, %v: tensor<4x8xf32>,
             %w: tensor<4x8xf32>)
    -> (tensor<128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<8xf32>,
        tensor<8xf32>, tensor<8xbf16>, tensor<8xbf16>, tensor<2x8xf32>,
        tensor<2x8xf32>, tensor<4x4xf32>) {
  %ra = moe.all_reduce %a {mesh = @mesh, axes = ["dp"]} : tensor<128xf32>
  %rt = moe.all_reduce %t {mesh = @mesh, axes = ["tp"]} : tensor<8xf32>
  %rh = moe.all_reduce %h {mesh = @mesh, axes = ["dp"]} : tensor<8xbf16>
  %rb = moe.all_reduce %b {mesh = @mesh, axes = ["dp"]} : tensor<128xf32>
  %ss = moe.reduce_scatter %s {mesh = @mesh, axes = ["dp"], dim = 0} : (tensor<4x8xf32>) -> tensor<2x8xf32>
  %ru = moe.all_reduce %u {mesh = @mesh, axes = ["tp"]} : tensor<8xf32>
  %rk = moe.all_reduce %k {mesh = @mesh, axes = ["dp"]} : tensor<8xbf16>
  %sv = moe.reduce_scatter %v {mesh = @mesh, axes = ["dp"], dim = 0} : (tensor<4x8xf32>) -> tensor<2x8xf32>
  %sw = moe.reduce_scatter %w {mesh = @mesh, axes = ["dp"], dim = 1} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  %rc = moe.all_reduce %c {mesh = @mesh, axes = ["dp"]} : tensor<128xf32>
  return %ra, %rb, %rc, %rt, %ru, %rh, %rk, %ss, %sv, %sw
      : tensor<128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<8xf32>,
        tensor<8xf32>, tensor<8xbf16>, tensor<8xbf16>, tensor<2x8xf32>,
        tensor<2x8xf32>, tensor<4x4xf32>
}
// CHECK-LABEL: func.func @f
// CHECK-NEXT: %[[AB:.*]]:2 = moe.reduce_bucket %arg0, %arg1 {axes = ["dp"], mesh = @mesh}
// CHECK-NEXT: %[[TU:.*]]:2 = moe.reduce_bucket %arg3, %arg4 {axes = ["tp"], mesh = @mesh}
// CHECK-NEXT: %[[HK:.*]]:2 = moe.reduce_bucket %arg5, %arg6 {axes = ["dp"], mesh = @mesh}
// CHECK-SAME: (tensor<8xbf16>, tensor<8xbf16>)
// CHECK-NEXT: %[[SV:.*]]:2 = moe.reduce_bucket %arg7, %arg8 {axes = ["dp"], mesh = @mesh, scatter}
// CHECK-SAME: (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>)
// CHECK-NEXT: %[[W:.*]] = moe.reduce_scatter %arg9 {{{.*}}dim = 1
// CHECK-NEXT: %[[C:.*]] = moe.all_reduce %arg2
// CHECK-NEXT: return %[[AB]]#0, %[[AB]]#1, %[[C]], %[[TU]]#0, %[[TU]]#1, %[[HK]]#0, %[[HK]]#1, %[[SV]]#0, %[[SV]]#1, %[[W]]

// -----

// A bucket holds one pipeline unit's gradients (the parameters their
// updates name): layer 1's two, then layer 0's alone.
module attributes {moe.model = {layers = 2 : i64}} {
  moe.mesh @mesh(dp = 2)
  moe.param @model.layers.0.w : tensor<8xf32> {init = #moe.init<ones>}
  moe.param @model.layers.0.w.m : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.w.v : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.w : tensor<8xf32> {init = #moe.init<ones>}
  moe.param @model.layers.1.w.m : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.w.v : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.u : tensor<8xf32> {init = #moe.init<ones>}
  moe.param @model.layers.1.u.m : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.u.v : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  func.func @f(%g1w: tensor<8xf32>, %g1u: tensor<8xf32>, %g0w: tensor<8xf32>,
               %lr: tensor<f32>, %scale: tensor<f32>, %step: tensor<i32>) {
    %r1w = moe.all_reduce %g1w {mesh = @mesh, axes = ["dp"]} : tensor<8xf32>
    %r1u = moe.all_reduce %g1u {mesh = @mesh, axes = ["dp"]} : tensor<8xf32>
    %r0w = moe.all_reduce %g0w {mesh = @mesh, axes = ["dp"]} : tensor<8xf32>
    moe.adamw_update @model.layers.0.w, @model.layers.0.w.m, @model.layers.0.w.v, %r0w, %lr, %scale, %step {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<8xf32>
    moe.adamw_update @model.layers.1.w, @model.layers.1.w.m, @model.layers.1.w.v, %r1w, %lr, %scale, %step {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<8xf32>
    moe.adamw_update @model.layers.1.u, @model.layers.1.u.m, @model.layers.1.u.v, %r1u, %lr, %scale, %step {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<8xf32>
    return
  }
}
// CHECK-LABEL: func.func @f
// CHECK-NEXT: %[[L1:.*]]:2 = moe.reduce_bucket %arg0, %arg1
// CHECK-NEXT: %[[L0:.*]] = moe.all_reduce %arg2
// CHECK-NEXT: moe.adamw_update @model.layers.0.w, {{.*}}, %[[L0]],
// CHECK-NEXT: moe.adamw_update @model.layers.1.w, {{.*}}, %[[L1]]#0,
// CHECK-NEXT: moe.adamw_update @model.layers.1.u, {{.*}}, %[[L1]]#1,
