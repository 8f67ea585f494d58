// The collectives report names the dtype a collective moves where it is not
// fp32 (issue 16): the FSDP all-gather of a BF16 working copy moves BF16,
// and the memory report counts it as a bf16 message.
// RUN: moe-opt %s --moe-print-report="report=collectives" -o /dev/null | FileCheck %s
// CHECK: all_gather     over {fsdp}: [8, 16] of bf16, 128 bytes sent
// RUN: moe-opt %s --moe-print-report="report=memory" -o /dev/null | FileCheck %s --check-prefix=MEMORY
// MEMORY: messages (collectives per step) by dtype: bf16 0.00 MiB;
module attributes {moe.precision = {compute = "bf16", grad_reduce = "fp32"}} {
  moe.mesh @mesh(fsdp = 2)
  func.func @train_step(%w: tensor<4x16xbf16>) -> tensor<8x16xbf16> {
    %g = moe.all_gather %w {axes = ["fsdp"], dim = 0 : i64, mesh = @mesh} : (tensor<4x16xbf16>) -> tensor<8x16xbf16>
    return %g : tensor<8x16xbf16>
  }
}
