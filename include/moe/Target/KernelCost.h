//===- KernelCost.h - seconds of GEMMs and attention kernels ----*- C++ -*-===//
//
// What one kernel costs on a GPU (issue 21), shared by the cost of a
// compiled step (CostModel) and the plan search (PlanModel):
//   * a GEMM by its shape: the tensor cores compute whole output tiles in
//     waves over the SMs, so a GEMM whose tiles do not fill the last wave,
//     or whose rows do not fill a tile (an expert's few tokens), pays for
//     the empty part; a short reduction pays each tile's prologue and
//     epilogue; and a GEMM that moves more bytes than it computes runs at
//     HBM's rate (the roofline). The fraction of the peak a full wave of
//     full tiles reaches is the GPU's fitted `gemm_efficiency`;
//   * attention by the kernel that runs it (FlashAttention 2 or 3, cuDNN,
//     moe-run's own, or unfused GEMMs), at that kernel's fraction of the
//     peak, forward and backward apart.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_KERNELCOST_H
#define MOE_TARGET_KERNELCOST_H

#include "moe/Target/Hardware.h"

#include <optional>
#include <string>

namespace mlir::moe {

/// `count` independent GEMMs of one shape, C[m, n] = A[m, k] B[k, n] (a
/// grouped GEMM over experts has count > 1).
struct GemmShape {
  double m = 0, n = 0, k = 0, count = 1;
  double flops() const { return 2 * m * n * k * count; }
  /// The backward of this GEMM as a linear layer's forward (A the input, B
  /// the weight): the input's gradient, m x k reducing n, and the weight's,
  /// k x n reducing m.
  GemmShape inputGradient() const { return {m, k, n, count}; }
  GemmShape weightGradient() const { return {k, n, m, count}; }
};

/// Seconds of `shape` on `gpu` at its FP8 rate (where it has FP8 tensor
/// cores) or BF16's, its operands `elementBytes` each.
double gemmSeconds(const GpuSpec &gpu, const GemmShape &shape, bool fp8,
                   double elementBytes);

/// The fraction of the peak `shape` reaches (its FLOPs over its seconds).
double gemmEfficiencyOf(const GpuSpec &gpu, const GemmShape &shape, bool fp8,
                        double elementBytes);

/// Seconds of `flops` of attention's core (scores and weighted sums, or
/// their gradients when `backward`) in the kernel named `kernel`, which
/// must be one of the GPU's (checkAttentionKernel).
double attentionSeconds(const GpuSpec &gpu, llvm::StringRef kernel,
                        double flops, bool backward);

/// Why `gpu` has no efficiency for `kernel` (naming those it has), or none.
std::optional<std::string> checkAttentionKernel(const GpuSpec &gpu,
                                                llvm::StringRef kernel);

} // namespace mlir::moe

#endif // MOE_TARGET_KERNELCOST_H
