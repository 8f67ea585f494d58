//===- OpCosts.cpp - model FLOPs of forward ops ---------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Transforms.h"

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
