//===- OpCosts.cpp - model FLOPs of forward ops ---------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Runtime/Capabilities.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Workspace.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace mlir::moe;

double mlir::moe::linearFlops(Value input, Value weight) {
  auto w = cast<ShapedType>(weight.getType()).getShape();
  double rows = cast<ShapedType>(input.getType()).getNumElements() / w[1];
  return 2.0 * rows * w[0] * w[1];
}

double mlir::moe::causalScoreEntries(int64_t queries, int64_t keys) {
  double s = static_cast<double>(queries);
  // A rank's block of a load-balanced sequence (context parallelism) sees
  // (keys + 1) / 2 keys per query on average: chunks c and 2 cp - 1 - c.
  if (keys > queries)
    return s * (static_cast<double>(keys) + 1) / 2.0;
  return s * (s + 1) / 2.0;
}

int64_t mlir::moe::attendedKeys(Operation *op, Value key,
                                std::optional<ArrayAttr> sequenceAxes,
                                bool ring) {
  int64_t keys = cast<ShapedType>(key.getType()).getShape()[1];
  if (!ring || !sequenceAxes)
    return keys;
  // A ring's key operand is the rank's block: every rank's pass it.
  MeshOp mesh = getMesh(op->getParentOfType<ModuleOp>());
  for (StringRef axis : sequenceAxes->getAsValueRange<StringAttr>())
    keys *= mesh ? mesh.getAxisSize(axis).value_or(1) : 1;
  return keys;
}

double mlir::moe::modelFlops(Operation *op) {
  if (auto linear = dyn_cast<LinearOp>(op))
    return linearFlops(linear.getInput(), linear.getWeight());
  // The LM head's GEMM; the loss it feeds costs no FLOPs here.
  if (auto loss = dyn_cast<LinearCrossEntropyOp>(op))
    return linearFlops(loss.getInput(), loss.getWeight());
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    auto q = attention.getQuery().getType().getShape();
    double b = q[0], width = q[2];
    // The values' heads may be narrower (MLA).
    double valueWidth = attention.getOutput().getType().getShape()[2];
    // QK^T and PV over the causal triangle.
    return 2.0 * b * (width + valueWidth) *
           causalScoreEntries(q[1], attendedKeys(op, attention.getKey(),
                                                 attention.getSequenceAxes(),
                                                 attention.getRing()));
  }
  if (auto experts = dyn_cast<ExpertsOp>(op)) {
    auto w1 = experts.getW1().getType().getShape();
    double assignments = experts.getWeights().getType().getNumElements();
    return 2.0 * assignments * 3.0 * w1[1] * w1[2];
  }
  return 0;
}

namespace {

/// The module's recorded target runs on the cuda backend.
bool runsOnCuda(ModuleOp module) {
  auto target = module->getAttrOfType<StringAttr>(kTargetAttrName);
  if (!target)
    return false;
  const ::moe::caps::Capabilities *record =
      ::moe::caps::targetCapabilities(target.strref());
  return record && record->backend == "cuda";
}

bool isBf16(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  return shaped && shaped.getElementType().isBF16();
}

/// BF16 elements among an op's operands and results (each buffer once).
int64_t bf16Elements(Operation *op) {
  llvm::SmallPtrSet<Value, 8> seen;
  int64_t elements = 0;
  for (ValueRange values :
       {ValueRange(op->getOperands()), ValueRange(op->getResults())})
    for (Value value : values)
      if (isBf16(value.getType()) && seen.insert(value).second)
        elements += cast<ShapedType>(value.getType()).getNumElements();
  return elements;
}

/// The ops whose CUDA kernels run on BF16 storage as it is (the runtime's
/// runsOnBf16Storage, lib/Runtime/Cuda/DeviceBf16.cpp, and the GEMMs,
/// casts, AdamW and collectives), when every float tensor but the weight
/// gradients and loss scalars is BF16; the others widen theirs.
bool runsOnBf16Storage(Operation *op) {
  if (isa<LinearOp, LinearGradInputOp, LinearGradWeightOp, CastOp,
          AdamWUpdateOp, AllReduceOp, AllGatherOp, ReduceScatterOp, SliceOp,
          ReduceBucketOp, EmbeddingOp, RMSNormOp, RoPEOp, RoPEGradOp, SwiGLUOp,
          SwiGLUGradOp, AddOp, CrossEntropyOp, CrossEntropyGradOp>(op))
    return true;
  // Their weight gradients are fp32 (BF16 reductions widen them).
  if (isa<RMSNormGradOp>(op))
    return !isBf16(op->getResult(1).getType());
  if (isa<EmbeddingGradOp>(op))
    return !isBf16(op->getResult(0).getType());
  // The tensor-core attention takes heads up to 128 wide.
  auto headDim = [](Value query, int64_t heads) {
    return heads > 0
               ? cast<ShapedType>(query.getType()).getShape().back() / heads
               : 0;
  };
  if (auto attention = dyn_cast<AttentionOp>(op))
    return headDim(attention.getQuery(), attention.getNumHeads()) <=
           ::moe::rt::cuda::kTensorCoreAttentionMaxHeadDim;
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return headDim(grad.getQuery(), grad.getNumHeads()) <=
           ::moe::rt::cuda::kTensorCoreAttentionMaxHeadDim;
  return false;
}

/// What the workspace formulas take of an Experts or ExpertsGrad op.
struct ExpertsShape {
  int64_t tokens, topK, hidden, ffn, experts, groupSize;
  bool backward, fp8, bf16;
  /// Blockwise FP8 scaling (block scales, padded rows).
  bool blockwise = false;
  /// Expert axes (a group of one included: its rows still travel through
  /// the exchange's buffers), and the FP8 dispatch's block (0: none).
  bool expertParallel = false;
  int64_t fp8DispatchBlock = 0;
};

std::optional<ExpertsShape> expertsShapeOf(Operation *op, MeshOp mesh) {
  auto shape = [&](Value x, Value ids, Value w1, bool backward,
                   std::optional<Fp8Scaling> fp8, std::optional<ArrayAttr> axes,
                   bool fp8Dispatch, std::optional<uint64_t> fp8Block) {
    auto xShape = cast<ShapedType>(x.getType());
    auto w1Shape = cast<ShapedType>(w1.getType()).getShape();
    int64_t hidden = xShape.getShape().back(), groupSize = 1;
    if (axes && mesh)
      for (StringRef axis : axes->getAsValueRange<StringAttr>())
        groupSize *= mesh.getAxisSize(axis).value_or(1);
    return ExpertsShape{xShape.getNumElements() / hidden,
                        cast<ShapedType>(ids.getType()).getShape().back(),
                        hidden,
                        w1Shape[1],
                        w1Shape[0],
                        groupSize,
                        backward,
                        fp8.has_value(),
                        isBf16(x.getType()),
                        fp8 == Fp8Scaling::blockwise,
                        axes.has_value(),
                        // The verifier has fp8_dispatch set a block; one
                        // scale per element is the worst.
                        fp8Dispatch
                            ? static_cast<int64_t>(fp8Block.value_or(1))
                            : 0};
  };
  if (auto forward = dyn_cast<ExpertsOp>(op))
    return shape(forward.getInput(), forward.getIndices(), forward.getW1(),
                 false, forward.getFp8(), forward.getExpertAxes(),
                 forward.getFp8Dispatch(), forward.getFp8Block());
  if (auto backward = dyn_cast<ExpertsGradOp>(op))
    return shape(backward.getInput(), backward.getIndices(), backward.getW1(),
                 true, backward.getFp8(), backward.getExpertAxes(),
                 backward.getFp8Dispatch(), backward.getFp8Block());
  return std::nullopt;
}

/// The packing buffer a strided collective op needs: the whole tensor when
/// its blocks are not contiguous (Collectives.h), else none.
uint64_t packBytes(Operation *op) {
  auto packs = [](Value block, Value whole, int64_t dim) -> uint64_t {
    auto shape = cast<ShapedType>(block.getType()).getShape();
    int64_t outer = 1;
    for (int64_t d = 0; d < dim && d < static_cast<int64_t>(shape.size()); ++d)
      outer *= shape[d];
    return outer > 1 ? tensorBytes(whole.getType()) : 0;
  };
  if (auto gather = dyn_cast<AllGatherOp>(op))
    return packs(gather->getOperand(0), gather->getResult(0), gather.getDim());
  if (auto scatter = dyn_cast<ReduceScatterOp>(op))
    return packs(scatter->getResult(0), scatter->getOperand(0),
                 scatter.getDim());
  // A bucket packs its operands, and a reduce-scatter's part of the sum
  // follows them.
  if (auto bucket = dyn_cast<ReduceBucketOp>(op)) {
    uint64_t bytes = 0;
    for (Value input : bucket.getInputs())
      bytes += tensorBytes(input.getType());
    if (bucket.getScatter())
      for (Value result : bucket.getResults())
        bytes += tensorBytes(result.getType());
    return bytes;
  }
  return 0;
}

/// The largest scratch of one op on the CPU backend: the experts' and
/// attention's (cpu::expertsWorkspaceBytes, attentionWorkspaceBytes).
uint64_t cpuScratchBytes(Operation *op,
                         const std::optional<ExpertsShape> &experts) {
  namespace cpu = ::moe::rt::cpu;
  if (experts)
    return cpu::expertsWorkspaceBytes(
        experts->tokens, experts->topK, experts->hidden, experts->ffn,
        experts->backward, experts->fp8, experts->groupSize);
  // Query and value head widths.
  auto headWidths = [](Value query, Value value, int64_t heads,
                       int64_t kvHeads) {
    return std::make_pair(cast<ShapedType>(query.getType()).getShape()[2] /
                              std::max<int64_t>(1, heads),
                          cast<ShapedType>(value.getType()).getShape()[2] /
                              std::max<int64_t>(1, kvHeads));
  };
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    auto [d, dv] =
        headWidths(attention.getQuery(), attention.getValue(),
                   attention.getNumHeads(), attention.getNumKvHeads());
    return cpu::attentionWorkspaceBytes(d, false, 1, dv);
  }
  if (auto grad = dyn_cast<AttentionGradOp>(op)) {
    auto [d, dv] = headWidths(grad.getQuery(), grad.getValue(),
                              grad.getNumHeads(), grad.getNumKvHeads());
    return cpu::attentionWorkspaceBytes(d, true, 1, dv);
  }
  // The fused LM head's logits block.
  auto headRows = [](Value input, Value weight) {
    auto x = cast<ShapedType>(input.getType());
    int64_t vocab = cast<ShapedType>(weight.getType()).getShape()[0];
    return cpu::linearCrossEntropyWorkspaceBytes(
        x.getNumElements() / x.getShape().back(), vocab);
  };
  if (auto loss = dyn_cast<LinearCrossEntropyOp>(op))
    return headRows(loss.getInput(), loss.getWeight());
  if (auto grad = dyn_cast<LinearCrossEntropyGradOp>(op))
    return headRows(grad.getInput(), grad.getWeight());
  return 0;
}

/// The same on the cuda backend (moe/Runtime/Cuda/Workspace.h): the
/// experts' stacked rows, attention's D, the fp32 widening of an op without
/// a BF16 kernel, from the stream-ordered pool.
uint64_t cudaScratchBytes(Operation *op,
                          const std::optional<ExpertsShape> &experts) {
  namespace cuda = ::moe::rt::cuda;
  uint64_t bytes = 0;
  if (experts) {
    cuda::ExpertsScratchShape shape;
    shape.tokens = experts->tokens;
    shape.topK = experts->topK;
    shape.hidden = experts->hidden;
    shape.ffn = experts->ffn;
    shape.experts = experts->experts;
    shape.backward = experts->backward;
    shape.bf16 = experts->bf16;
    shape.fp8 = experts->fp8;
    shape.blockwise = experts->blockwise;
    shape.groupSize = experts->expertParallel ? experts->groupSize : 0;
    shape.fp8DispatchBlock = experts->fp8DispatchBlock;
    bytes = cuda::expertsWorkspaceBytes(shape);
  }
  if (auto grad = dyn_cast<AttentionGradOp>(op)) {
    auto q = cast<ShapedType>(grad.getQuery().getType()).getShape();
    bytes = cuda::attentionWorkspaceBytes(q[0], q[1], grad.getNumHeads());
  }
  if (!runsOnBf16Storage(op))
    bytes = std::max(bytes, cuda::widenedBytes(bf16Elements(op)));
  return bytes;
}

} // namespace

uint64_t mlir::moe::kernelWorkspaceBytes(ModuleOp module, func::FuncOp step,
                                         std::optional<int64_t> pipelineRank,
                                         int64_t ranks) {
  // Mirrors the backend that runs the module's target. The CPU's
  // (Executor::bytesPerRank): the packing buffer of strided collectives (a
  // whole tensor) and the largest scratch of one op, on one thread (a few
  // kernels keep a block per thread: the runtime counts its threads). The
  // cuda backend's: cuBLASLt's workspace, the packing buffer and the
  // largest scratch of one op.
  MeshOp mesh = getMesh(module);
  bool cuda = runsOnCuda(module);
  uint64_t pack = 0, largest = 0;
  step.walk([&](Operation *op) {
    if (pipelineRank)
      if (std::optional<int64_t> rank = pipelineRankRunning(op, ranks);
          rank && *rank != *pipelineRank)
        return;
    pack = std::max(pack, packBytes(op));
    std::optional<ExpertsShape> experts = expertsShapeOf(op, mesh);
    largest = std::max(largest, cuda ? cudaScratchBytes(op, experts)
                                     : cpuScratchBytes(op, experts));
  });
  return (cuda ? ::moe::rt::cuda::kGemmWorkspaceBytes : 0) + pack + largest;
}
