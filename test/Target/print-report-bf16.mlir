// moe-print-report of a mixed-precision step (issue 16): the memory report
// names the recorded precision, splits the bytes per parameter into master,
// moments, working copy and gradient from the element types of the AdamW
// update, and shows kept activations and messages by dtype.
// RUN: moe-opt %s --moe-print-report="report=memory" -o /dev/null | FileCheck %s
// CHECK: memory per rank (1 rank, bf16, fp32 gradient reductions)
// CHECK-NEXT: parameters: 64 total, 64 active per token
// CHECK-NEXT: parameters 0.00 MiB
// CHECK-NEXT: optimizer state (AdamW m, v)
// CHECK-NEXT: working copies (what GEMMs read)
// CHECK-NEXT: bytes per parameter: 4 master, 8 moments, 2 working copy, 4 gradient (18)
// CHECK: kept activations by dtype: bf16 {{[0-9.]+}} MiB;
// CHECK-NEXT: messages (collectives per step) by dtype: none
// CHECK-NEXT: activations and messages: 2 bytes per element (bf16)
module attributes {moe.precision = {compute = "bf16", grad_reduce = "fp32"}} {
  moe.param @mp : tensor<8x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
  moe.param @mp.exp_avg : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @mp.exp_avg_sq : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @mp.bf16 : tensor<8x8xbf16> {kind = #moe.param_kind<working_copy>, master = @mp}
  func.func @train_step(%x: tensor<2x4x8xbf16>, %lr: tensor<f32>, %step: tensor<i32>) -> tensor<2x4x8xf32> {
    %w = moe.get_param @mp.bf16 : tensor<8x8xbf16>
    %y = moe.linear %x, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
    %logits = moe.linear %y, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xf32>
    %dw = moe.linear_grad_weight %y, %x : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
    %dw32 = moe.cast %dw : tensor<8x8xbf16> to tensor<8x8xf32>
    moe.adamw_update @mp, @mp.exp_avg, @mp.exp_avg_sq, %dw32, %lr, %lr, %step
        {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.1 : f32, working_copy = @mp.bf16} : tensor<8x8xf32>
    return %logits : tensor<2x4x8xf32>
  }
}
