//===- OpCosts.cpp - model FLOPs of forward ops ---------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Transforms.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Runtime/Cpu/Kernels.h"

using namespace mlir;
using namespace mlir::moe;

double mlir::moe::modelFlops(Operation *op) {
  if (auto linear = dyn_cast<LinearOp>(op)) {
    auto w = linear.getWeight().getType().getShape();
    double rows = linear.getInput().getType().getNumElements() / w[1];
    return 2.0 * rows * w[0] * w[1];
  }
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    auto q = attention.getQuery().getType().getShape();
    double b = q[0], s = q[1], width = q[2];
    // QK^T and PV over the causal triangle (s(s+1)/2 score entries).
    return 2.0 * 2.0 * b * width * s * (s + 1) / 2.0;
  }
  if (auto experts = dyn_cast<ExpertsOp>(op)) {
    auto w1 = experts.getW1().getType().getShape();
    double assignments = experts.getWeights().getType().getNumElements();
    return 2.0 * assignments * 3.0 * w1[1] * w1[2];
  }
  return 0;
}

uint64_t mlir::moe::kernelWorkspaceBytes(ModuleOp module, func::FuncOp step) {
  // Mirrors Executor::bytesPerRank: AdamW's chunk buffer (64 Ki floats),
  // the packing buffer of strided collectives (a whole tensor), and the
  // largest scratch of one experts or attention kernel (cpu::
  // expertsWorkspaceBytes, attentionWorkspaceBytes). `largest` holds it.
  constexpr uint64_t kAdamwScratchBytes = (1 << 16) * sizeof(float);
  MeshOp mesh = getMesh(module);
  uint64_t pack = 0, largest = 0;
  auto packs = [&](Value block, Value whole, int64_t dim) {
    auto shape = cast<ShapedType>(block.getType()).getShape();
    int64_t outer = 1;
    for (int64_t d = 0; d < dim && d < static_cast<int64_t>(shape.size()); ++d)
      outer *= shape[d];
    if (outer > 1)
      pack = std::max(pack, tensorBytes(whole.getType()));
  };
  auto groupSize = [&](std::optional<ArrayAttr> axes) {
    int64_t size = 1;
    if (axes && mesh)
      for (StringRef axis : axes->getAsValueRange<StringAttr>())
        size *= mesh.getAxisSize(axis).value_or(1);
    return size;
  };
  auto expertsScratch = [&](Value x, Value ids, Value w1, bool backward,
                            bool fp8, std::optional<ArrayAttr> axes) {
    auto xShape = cast<ShapedType>(x.getType());
    int64_t H = xShape.getShape().back();
    int64_t topK = cast<ShapedType>(ids.getType()).getShape().back();
    int64_t F = cast<ShapedType>(w1.getType()).getShape()[1];
    largest = std::max(largest, ::moe::rt::cpu::expertsWorkspaceBytes(
                                    xShape.getNumElements() / H, topK, H, F,
                                    backward, fp8, groupSize(axes)));
  };
  step.walk([&](Operation *op) {
    if (auto attention = dyn_cast<AttentionOp>(op))
      largest = std::max(largest,
                         ::moe::rt::cpu::attentionWorkspaceBytes(
                             attention.getQuery().getType().getShape()[1],
                             false));
    else if (auto grad = dyn_cast<AttentionGradOp>(op))
      largest = std::max(largest,
                         ::moe::rt::cpu::attentionWorkspaceBytes(
                             cast<ShapedType>(grad->getOperand(1).getType())
                                 .getShape()[1],
                             true));
    if (auto gather = dyn_cast<AllGatherOp>(op))
      packs(gather->getOperand(0), gather->getResult(0), gather.getDim());
    else if (auto scatter = dyn_cast<ReduceScatterOp>(op))
      packs(scatter->getResult(0), scatter->getOperand(0), scatter.getDim());
    else if (auto forward = dyn_cast<ExpertsOp>(op))
      expertsScratch(forward.getInput(), forward.getIndices(), forward.getW1(),
                     false, forward.getFp8().has_value(),
                     forward.getExpertAxes());
    else if (auto backward = dyn_cast<ExpertsGradOp>(op))
      expertsScratch(backward.getInput(), backward.getIndices(),
                     backward.getW1(), true, backward.getFp8().has_value(),
                     backward.getExpertAxes());
  });
  return kAdamwScratchBytes + pack + largest;
}
