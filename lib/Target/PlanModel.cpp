//===- PlanModel.cpp - the predicted step of a parallelism plan -----------===//
//
// The analytical step model behind `moec --plan` and bench/published/
// (Planner.h). Everything is per GPU of the busiest pipeline stage and per
// microbatch, then assembled by the pipeline schedule.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Workspace.h"
#include "moe/Target/Collectives.h"
#include "moe/Target/CompilePipeline.h"
#include "moe/Target/KernelCost.h"
#include "moe/Target/Planner.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::moe;
namespace pp = ::moe::pipeline;

//===----------------------------------------------------------------------===//
// ModelShape
//===----------------------------------------------------------------------===//

double ModelShape::attentionSplitParams() const {
  double h = hidden;
  if (!latentAttention())
    return h * (2 * queryWidth() + 2 * kvWidth());
  double n = heads, query = n * (nopeHeadDim + ropeHeadDim);
  double queryIn = qLoraRank > 0 ? qLoraRank : h;
  return queryIn * query + kvLoraRank * n * (nopeHeadDim + valueHeadDim) +
         n * valueHeadDim * h;
}

double ModelShape::attentionWholeParams() const {
  if (!latentAttention())
    return 0;
  double h = hidden;
  double query = qLoraRank > 0 ? h * qLoraRank + qLoraRank : 0;
  return query + h * (kvLoraRank + ropeHeadDim) + kvLoraRank;
}

double ModelShape::attentionCoreWidth() const {
  if (!latentAttention())
    return 2 * queryWidth();
  return static_cast<double>(heads) *
         (nopeHeadDim + ropeHeadDim + valueHeadDim);
}

/// Weights of one layer outside its MLP: attention's, two norms and the
/// QK-norms' two of a head each.
static double attentionParams(const ModelShape &m) {
  double h = m.hidden;
  double qkNorms = m.qkNorm && m.heads > 0 ? 2 * m.queryWidth() / m.heads : 0;
  return m.attentionSplitParams() + m.attentionWholeParams() + 2 * h + qkNorms;
}

double ModelShape::denseParams() const {
  double h = hidden;
  return layers * attentionParams(*this) + denseLayers * 3.0 * h * denseFfn +
         moeLayers() * (h * experts + 3.0 * h * sharedFfn) +
         (tiedEmbeddings ? 1.0 : 2.0) * vocab * h + h;
}

double ModelShape::expertParams() const {
  return static_cast<double>(moeLayers()) * experts * 3.0 * hidden * ffn;
}

double ModelShape::modelFlopsPerToken() const {
  double h = hidden;
  // The projections, and the core over the causal half.
  double attention = 2 * (attentionSplitParams() + attentionWholeParams()) +
                     seq * attentionCoreWidth();
  double forward =
      layers * attention + denseLayers * 6.0 * h * denseFfn +
      moeLayers() * (6.0 * h * (ffn * topK + sharedFfn) + 2 * h * experts) +
      2.0 * h * vocab;
  return 3 * forward;
}

FailureOr<ModelShape> mlir::moe::modelShapeOf(ModuleOp module) {
  auto transformers = module.getOps<TransformerOp>();
  if (transformers.empty())
    return module.emitError()
           << "--plan needs the model's sizes (a moe.transformer)";
  TransformerOp t = *transformers.begin();
  ModelShape shape;
  shape.name = t.getSymName().str();
  shape.vocab = t.getVocab();
  shape.hidden = t.getHidden();
  shape.layers = t.getLayers();
  shape.heads = t.getHeads();
  shape.kvHeads = t.getKvHeads();
  shape.headDim = t.getHeadDim() ? static_cast<int64_t>(*t.getHeadDim()) : 0;
  shape.qkNorm = t.getQkNorm();
  shape.qLoraRank = static_cast<int64_t>(t.getQLoraRank().value_or(0));
  shape.kvLoraRank = static_cast<int64_t>(t.getKvLoraRank().value_or(0));
  shape.ropeHeadDim = static_cast<int64_t>(t.getQkRopeHeadDim().value_or(0));
  shape.nopeHeadDim = static_cast<int64_t>(t.getQkNopeHeadDim().value_or(0));
  shape.valueHeadDim = static_cast<int64_t>(t.getVHeadDim().value_or(0));
  shape.tiedEmbeddings = t.getTieWordEmbeddings();
  shape.experts = t.getExperts();
  shape.topK = t.getTopK();
  shape.ffn = t.getFfn();
  shape.sharedFfn = static_cast<int64_t>(t.getSharedExperts()) * shape.ffn;
  shape.denseLayers = static_cast<int64_t>(t.getDenseLayers().size());
  shape.denseFfn = t.getDenseFfn() ? static_cast<int64_t>(*t.getDenseFfn())
                                   : shape.ffn;
  shape.seq = t.getSeq();
  return shape;
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

const char *mlir::moe::toString(Remat remat) {
  switch (remat) {
  case Remat::None:
    return "none";
  case Remat::Selective:
    return "selective";
  case Remat::Full:
    return "full";
  }
  return "?";
}

std::string ParallelPlan::meshSpec() const {
  // Folded over tp, the ep axis holds only the group's data ranks.
  int64_t epAxis = expertDataRanks();
  std::string spec = (fsdp ? "fsdp=" : "dp=") + std::to_string(dp / epAxis);
  if (epAxis > 1)
    spec += ",ep=" + std::to_string(epAxis);
  if (cp > 1)
    spec += ",cp=" + std::to_string(cp);
  if (tp > 1)
    spec += ",tp=" + std::to_string(tp);
  return spec;
}

std::string ParallelPlan::describe() const {
  std::string text = llvm::formatv("tp={0} pp={1}", tp, pp);
  if (virtualStages > 1)
    text += llvm::formatv(" vpp={0}", virtualStages).str();
  if (cp > 1)
    text += llvm::formatv(" cp={0}", cp).str();
  text += llvm::formatv(" {0}={1} ep={2}", fsdp ? "fsdp" : "dp", dp, ep).str();
  if (etp > 0 && etp != tp)
    text += llvm::formatv(" etp={0}", etp).str();
  if (expertsFolded && ep > 1)
    text += " folded";
  if (zero1)
    text += " zero1";
  text += llvm::formatv(" mb={0} remat={1}{2}", microbatchSize, toString(remat),
                        fp8 ? " fp8" : "")
              .str();
  if (pp > 1)
    text += std::string(" ") + pp::toString(schedule);
  return text;
}

std::optional<std::string> mlir::moe::checkPlan(const ModelShape &model,
                                                const ParallelPlan &plan,
                                                int64_t globalBatch) {
  if (plan.tp < 1 || plan.pp < 1 || plan.dp < 1 || plan.ep < 1 || plan.cp < 1 ||
      plan.virtualStages < 1 || plan.microbatchSize < 1)
    return std::string("every degree must be at least 1");
  // Two chunks per cp rank, then tp's sequence-parallel split of them.
  if (plan.cp > 1 &&
      (model.seq % (2 * plan.cp) || (model.seq / plan.cp) % plan.tp))
    return llvm::formatv("cp={0} needs the sequence of {1} in 2 x {0} equal "
                         "chunks, and tp={2} dividing each rank's pair",
                         plan.cp, model.seq, plan.tp)
        .str();
  // moec splits attention by key/value head groups.
  if (model.kvHeads % plan.tp || model.hidden % plan.tp ||
      model.ffn % plan.tp || model.denseFfn % plan.tp)
    return llvm::formatv("tp={0} does not divide the key/value heads, hidden "
                         "and MLP widths",
                         plan.tp)
        .str();
  if (plan.pp == 1 && plan.virtualStages > 1)
    return std::string("virtual stages need a pipeline (pp > 1)");
  if (plan.pp * plan.virtualStages > model.layers)
    return llvm::formatv("pp={0} x {1} virtual stages exceeds the {2} layers",
                         plan.pp, plan.virtualStages, model.layers)
        .str();
  if (plan.fsdp && plan.zero1)
    return std::string("fsdp shards the optimizer state already (zero1 "
                       "shards only it)");
  if (plan.etp > 0 && (plan.tp % plan.etp || model.ffn % plan.etp))
    return llvm::formatv("etp={0} must divide tp={1} and the expert width {2}",
                         plan.etp, plan.tp, model.ffn)
        .str();
  if (plan.etp > 0 && plan.etp != plan.tp && !plan.expertsFolded)
    return llvm::formatv("etp={0} apart from tp={1} needs the experts folded "
                         "(MoE parallel folding)",
                         plan.etp, plan.tp)
        .str();
  if (model.experts % plan.ep)
    return llvm::formatv("ep={0} must divide the {1} experts", plan.ep,
                         model.experts)
        .str();
  if (plan.expertsFolded
          ? (plan.tp * plan.cp * plan.dp) % (plan.expertTp() * plan.ep)
          : plan.dp % plan.ep)
    return plan.expertsFolded
               ? llvm::formatv("ep={0} x etp={1} must divide a stage's tp x "
                               "cp x dp = {2} ranks",
                               plan.ep, plan.expertTp(),
                               plan.tp * plan.cp * plan.dp)
                     .str()
               : llvm::formatv("ep={0} must divide dp={1}", plan.ep, plan.dp)
                     .str();
  if (globalBatch % (plan.dp * plan.microbatchSize))
    return llvm::formatv("dp={0} x microbatch {1} does not divide the global "
                         "batch of {2}",
                         plan.dp, plan.microbatchSize, globalBatch)
        .str();
  int64_t microbatches = globalBatch / (plan.dp * plan.microbatchSize);
  if (plan.pp > 1) {
    pp::ScheduleOptions options;
    options.stages = static_cast<int>(plan.pp);
    options.microbatches = static_cast<int>(microbatches);
    options.virtualStages = static_cast<int>(plan.virtualStages);
    if (std::optional<std::string> error =
            pp::validateOptions(plan.schedule, options))
      return *error;
    if (microbatches < plan.pp)
      return llvm::formatv("{0} microbatches cannot fill {1} stages",
                           microbatches, plan.pp)
          .str();
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// The step
//===----------------------------------------------------------------------===//

namespace {
/// One microbatch's pass over one layer on one GPU, split into what the
/// tensor cores, HBM and the links spend.
struct LayerPass {
  double gemm = 0, memory = 0, tensorComm = 0;
  /// The expert all-to-all: all of it, and what the expert GEMMs do not
  /// hide (chunked exchanges overlap them).
  double expertComm = 0, expertCommExposed = 0;
  /// Context parallelism's key/value exchange: all of it, and what the
  /// attention core does not hide.
  double contextComm = 0, contextCommExposed = 0;
  double compute() const { return gemm + memory; }
};

/// The step's pieces for one layer kind (dense or MoE).
struct LayerCosts {
  LayerPass forward, backward;
  /// Activation bytes a microbatch keeps between its forward and backward.
  double keptBytes = 0;
  /// Bytes the recomputation of one layer needs at once (full remat).
  double fullBytes = 0;
  /// The expert exchange's chunks (moe-run --expert-chunks).
  int64_t expertChunks = 1;
};

/// The expert all-to-all of one pass in `chunks` chunks, each sent while
/// the previous one computes: `exchange(bytesFraction)` costs one chunk's
/// exchanges, `compute` is the pass's expert GEMMs. Returns the seconds
/// beyond the compute, with the contention the overlapped part causes.
double exposedExpertExchange(llvm::function_ref<double(double)> exchange,
                             double compute, int64_t chunks,
                             double contention) {
  double c = static_cast<double>(chunks);
  double network = exchange(1.0 / c), gemm = compute / c;
  double makespan = network + gemm + (c - 1) * std::max(network, gemm);
  double overlapped = (c - 1) * std::min(network, gemm);
  return makespan - compute + contention * overlapped;
}

/// A forward GEMM and the two of its backward: the input's gradient
/// (m x k from m x n and n x k) and the weight's (k x n, reducing m).
struct LinearGemms {
  double forward = 0, backward = 0;
};
LinearGemms linearGemms(const GpuSpec &gpu, GemmShape shape, bool fp8,
                        double bytes) {
  return {gemmSeconds(gpu, shape, fp8, bytes),
          gemmSeconds(gpu, shape.inputGradient(), fp8, bytes) +
              gemmSeconds(gpu, shape.weightGradient(), fp8, bytes)};
}

LayerCosts layerCosts(const ModelShape &model, const ParallelPlan &plan,
                      const ClusterSpec &cluster, const SoftwareTraits &sw,
                      bool moeLayer) {
  const GpuSpec &gpu = cluster.gpu;
  // A GPU's tokens: its block of the sequence under context parallelism.
  // Between the blocks they are split over tp too (sequence parallel); the
  // GEMMs gather them and split their weights instead.
  double t = plan.tp, tokens = plan.microbatchSize * model.seq / plan.cp;
  double h = model.hidden, q = model.queryWidth();
  double act = sw.activationBytes;
  bool fp8Gemm = plan.fp8 && gpu.fp8Tflops > 0;
  bool fp8Linear = fp8Gemm && sw.fp8AllLinears;
  double gemmBytes = fp8Gemm ? 1.0 : act;
  double width = moeLayer ? model.ffn : model.denseFfn;
  double routed = moeLayer ? model.topK : 1.0;

  LayerPass fwd;
  LayerCosts costs;
  LayerPass &bwd = costs.backward;
  // The projections by their shapes: column-parallel ones split their
  // outputs over tp, row-parallel ones their inputs.
  double linearForward = 0, linearBackward = 0;
  auto linear = [&](double m, double n, double k, bool fp8, double count = 1) {
    LinearGemms g = linearGemms(gpu, {m, n, k, count}, fp8, fp8 ? 1.0 : act);
    linearForward += g.forward;
    linearBackward += g.backward;
  };
  if (!model.latentAttention()) {
    linear(tokens, (q + 2 * model.kvWidth()) / t, h, fp8Linear);
    linear(tokens, h, q / t, fp8Linear);
  } else {
    // MLA: the down-projections run whole on every tp rank, the
    // up-projections and the output split over heads.
    double n = model.heads;
    double queryIn = model.qLoraRank > 0 ? model.qLoraRank : h;
    if (model.qLoraRank > 0)
      linear(tokens, model.qLoraRank, h, fp8Linear);
    linear(tokens, model.kvLoraRank + model.ropeHeadDim, h, fp8Linear);
    linear(tokens, n * (model.nopeHeadDim + model.ropeHeadDim) / t, queryIn,
           fp8Linear);
    linear(tokens, n * (model.nopeHeadDim + model.valueHeadDim) / t,
           model.kvLoraRank, fp8Linear);
    linear(tokens, h, n * model.valueHeadDim / t, fp8Linear);
  }
  double mlpForward = 0, mlpBackward = 0;
  int64_t localExperts = 1;
  double expertRows = 0;
  if (moeLayer) {
    // The router on the GPU's own tokens; the shared experts as a dense
    // MLP beside the routed ones.
    linear(tokens / t, model.experts, h, false);
    if (model.sharedFfn > 0) {
      linear(tokens, 2 * model.sharedFfn / t, h, fp8Linear);
      linear(tokens, h, model.sharedFfn / t, fp8Linear);
    }
    // The routed experts: a GPU holds experts / ep of them, each split over
    // etp, and computes the rows its ep group routes there, gathered over
    // etp; the busiest GPU gets `imbalance` times the mean.
    double etp = plan.expertTp();
    localExperts = std::max<int64_t>(model.experts / plan.ep, 1);
    expertRows = tokens / t * model.topK * etp * sw.expertImbalance;
    double perExpert = expertRows / localExperts;
    LinearGemms up =
        linearGemms(gpu, {perExpert, 2 * width / etp, h, double(localExperts)},
                    fp8Gemm, gemmBytes);
    LinearGemms down =
        linearGemms(gpu, {perExpert, h, width / etp, double(localExperts)},
                    fp8Gemm, gemmBytes);
    mlpForward = up.forward + down.forward;
    mlpBackward = up.backward + down.backward;
  } else {
    double bytes = fp8Linear ? 1.0 : act;
    LinearGemms up =
        linearGemms(gpu, {tokens, 2 * width / t, h}, fp8Linear, bytes);
    LinearGemms down =
        linearGemms(gpu, {tokens, h, width / t}, fp8Linear, bytes);
    mlpForward = up.forward + down.forward;
    mlpBackward = up.backward + down.backward;
  }
  // Causal scores and the weighted sum: a fused kernel skips the masked
  // half at its own efficiency; unfused, batched GEMMs compute the whole
  // square. Each query meets the whole sequence's keys (a cp rank's
  // load-balanced block sees half of them on average).
  double headsHere = static_cast<double>(model.heads) / t;
  double coreFlops = 2 * tokens * model.seq * model.attentionCoreWidth() / t *
                     (sw.fusedAttention() ? 0.5 : 1.0);
  double coreForward, coreBackward;
  if (sw.fusedAttention()) {
    coreForward = attentionSeconds(gpu, sw.attentionKernel, coreFlops, false);
    // The backward recomputes the scores: 5 GEMMs to the forward's 2.
    coreBackward =
        attentionSeconds(gpu, sw.attentionKernel, 2.5 * coreFlops, true);
  } else {
    double widthPerHead = model.attentionCoreWidth() / 2 / model.heads;
    double batch = plan.microbatchSize * headsHere;
    GemmShape scores{tokens / plan.microbatchSize, double(model.seq),
                     widthPerHead, batch};
    GemmShape sum{tokens / plan.microbatchSize, widthPerHead, double(model.seq),
                  batch};
    coreForward = gemmSeconds(gpu, scores, false, act) +
                  gemmSeconds(gpu, sum, false, act);
    coreBackward = 2 * coreForward;
  }
  fwd.gemm = linearForward + mlpForward + coreForward;
  bwd.gemm = linearBackward + mlpBackward + coreBackward;
  double expertGemm = moeLayer ? mlpForward : 0;
  double expertGemmBackward = moeLayer ? mlpBackward : 0;
  // Streaming kernels (sequence parallel: each GPU does 1/t of the tokens):
  // two norms, two residual adds and RoPE over h; SwiGLU over the width;
  // the experts' permutation of routed rows.
  double sharedWidth = moeLayer ? static_cast<double>(model.sharedFfn) : 0.0;
  double stream =
      tokens * (12 * h + 3 * routed * width + 3 * sharedWidth) * act / t;
  if (moeLayer)
    stream += tokens * routed * h * act * 4 / t;
  // Unfused, each of those element-wise steps is several kernels (a norm is
  // a power, a mean, a reciprocal root and two products), each a pass.
  if (!sw.fusedElementwise)
    stream *= 3;
  // Dynamic FP8 scaling: each GEMM input is read for its amax, read again
  // and written as FP8 (5 bytes per bf16 element); the backward casts the
  // output gradient and the transposed inputs again.
  double fp8Inputs = 0;
  if (fp8Linear)
    fp8Inputs += tokens * (3 * h + q) / t;
  if (fp8Gemm)
    fp8Inputs += tokens * routed * (2 * h + width) / t;
  double fp8Casts = fp8Inputs * (2 * act + 1);
  stream += fp8Casts;
  double scores = plan.microbatchSize * headsHere * model.seq / plan.cp *
                  static_cast<double>(model.seq) * act;
  double unfused = sw.fusedAttention() ? 0 : 4 * scores;
  fwd.memory = (stream + unfused) / gpu.streamBytesPerSecond();
  bwd.memory = 2 * fwd.memory + fp8Casts / gpu.streamBytesPerSecond();

  CollectiveGroup tpGroup = stridedGroup(plan.tp, 1, cluster.gpusPerNode);
  double tpContention = contentionOf(cluster, tpGroup);
  // Two all-reduces of the layer's output per pass (attention and MLP), or
  // their sequence-parallel all-gather/reduce-scatter pairs (same bytes).
  // Async TP overlaps them with the GEMMs they feed, which they slow.
  double tpComm = 2 * allReduceSeconds(cluster, tpGroup, tokens * h * act);
  fwd.tensorComm =
      overlapped(tpComm, sw.overlapTensorParallel ? fwd.gemm : 0, tpContention);
  bwd.tensorComm =
      overlapped(tpComm, sw.overlapTensorParallel ? bwd.gemm : 0, tpContention);
  if (moeLayer && plan.expertTp() > 1 && plan.expertTp() != plan.tp) {
    // Expert tensor parallelism apart from attention's: the routed rows
    // gathered over etp before the experts, their outputs reduce-scattered.
    CollectiveGroup etpGroup =
        stridedGroup(plan.expertTp(), 1, cluster.gpusPerNode);
    double moved =
        2 * allGatherSeconds(cluster, etpGroup, expertRows * h * act);
    fwd.tensorComm += moved;
    bwd.tensorComm += moved;
  }
  if (plan.cp > 1) {
    // The whole sequence's keys and values of the GPU's heads gathered over
    // cp (ranks tp apart) before attention, their gradients
    // reduce-scattered after its backward; a ring hides them behind the
    // attention core it feeds, slowing it.
    double kvWidth =
        model.latentAttention()
            ? static_cast<double>(model.heads) *
                  (model.nopeHeadDim + model.ropeHeadDim + model.valueHeadDim)
            : 2 * model.kvWidth();
    CollectiveGroup cpGroup =
        stridedGroup(plan.cp, plan.tp, cluster.gpusPerNode);
    double moved = allGatherSeconds(
        cluster, cpGroup, plan.microbatchSize * model.seq * kvWidth / t * act);
    double contention = contentionOf(cluster, cpGroup);
    fwd.contextComm = moved;
    bwd.contextComm = moved;
    fwd.contextCommExposed = overlapped(
        moved, sw.overlapContextParallel ? coreForward : 0, contention);
    bwd.contextCommExposed = overlapped(
        moved, sw.overlapContextParallel ? coreBackward : 0, contention);
  }
  if (moeLayer && plan.ep > 1) {
    // Each pass sends the routed rows out (FP8 codes when asked) and back.
    CollectiveGroup epGroup =
        stridedGroup(plan.ep, plan.expertStride(), cluster.gpusPerNode);
    double rows = tokens * model.topK / t * sw.expertImbalance;
    // A deduplicating dispatcher sends a token across the network once per
    // other node it is bound for; the combine returns as it came.
    auto moved = [&](double bytes) {
      return sw.dedupedDispatch
                 ? dedupedDispatchSeconds(cluster, epGroup, bytes, model.topK)
                 : allToAllSeconds(cluster, epGroup, bytes);
    };
    auto exchange = [&](double share) {
      return moved(share * rows * h *
                   (plan.fp8 && sw.fp8Dispatch ? 1.0 : act)) +
             moved(share * rows * h * act);
    };
    double contention = contentionOf(cluster, epGroup);
    double passes = plan.remat == Remat::Full ? 3.0 : 2.0;
    fwd.expertComm = exchange(1.0);
    bwd.expertComm = (passes - 1) * fwd.expertComm;
    // Batch-level overlap: one microbatch's exchanges run beside another's
    // whole layer (attention, MLP and experts), and slow it. Otherwise the
    // chunk count moe-run should use: the fewest exposed seconds over the
    // forward and the backward.
    if (sw.batchLevelExpertOverlap) {
      fwd.expertCommExposed =
          overlapped(fwd.expertComm, fwd.compute(), contention);
      bwd.expertCommExposed =
          overlapped(bwd.expertComm, bwd.compute(), contention);
    }
    double best = -1;
    for (int64_t chunks : {1, 2, 4, 8}) {
      if (sw.batchLevelExpertOverlap ||
          (chunks > 1 && !sw.chunkedExpertExchange))
        break;
      double forwardExposed =
          exposedExpertExchange(exchange, expertGemm, chunks, contention);
      double backwardExposed =
          exposedExpertExchange(exchange, expertGemmBackward, chunks,
                                contention) +
          (passes - 2) * forwardExposed;
      if (best < 0 || forwardExposed + backwardExposed < best * 0.999) {
        best = forwardExposed + backwardExposed;
        costs.expertChunks = chunks;
        fwd.expertCommExposed = forwardExposed;
        bwd.expertCommExposed = backwardExposed;
      }
    }
  }
  costs.forward = fwd;
  if (plan.remat == Remat::Full) {
    bwd.gemm += fwd.gemm;
    bwd.memory += fwd.memory;
    bwd.tensorComm += fwd.tensorComm;
    bwd.contextComm += fwd.contextComm;
    bwd.contextCommExposed += fwd.contextCommExposed;
  } else if (plan.remat == Remat::Selective) {
    bwd.gemm += coreForward;
    bwd.memory += unfused / gpu.streamBytesPerSecond();
  }

  // Kept per token: norm inputs, residual, q/k/v and attention output over
  // h; the MLP's input, gate, up and product per routed row (and the shared
  // MLP's gate, up and product); an unfused attention also keeps the softmax
  // and its dropout mask per head.
  // MLA keeps its compressed vectors and the split and joined heads too.
  double attentionKept =
      model.latentAttention()
          ? static_cast<double>(model.heads) *
                    (2.0 * (model.nopeHeadDim + model.ropeHeadDim) +
                     2.0 * model.valueHeadDim) +
                model.qLoraRank + model.kvLoraRank + model.ropeHeadDim
          : 2 * q + 2 * model.kvWidth();
  // moe-run's experts keep only W1 x and W3 x per routed row (their
  // product is recomputed, the permuted input is not copied).
  double expertKept =
      moeLayer && sw.moeRun ? 2 * width : 3 * width + (moeLayer ? h : 0);
  double kept = 3 * h + attentionKept + routed * expertKept +
                (moeLayer ? 3.0 * model.sharedFfn : 0.0);
  double full =
      tokens * kept * act / t + (sw.fusedAttention() ? 0 : 2 * scores);
  costs.fullBytes = full;
  switch (plan.remat) {
  case Remat::None:
    costs.keptBytes = full;
    break;
  case Remat::Selective:
    costs.keptBytes = tokens * kept * act / t;
    break;
  case Remat::Full:
    costs.keptBytes = tokens * h * act / t;
    break;
  }
  return costs;
}

/// The makespan of the pipeline for stage passes of `forward` and
/// `backward` seconds per microbatch, and each rank's peak activations in
/// chunk units.
struct PipelineRun {
  double makespan = 0;
  std::vector<int> inFlight;
};

PipelineRun runPipeline(const ParallelPlan &plan, int64_t microbatches,
                        double forward, double backward, bool simulate) {
  PipelineRun run;
  double m = static_cast<double>(microbatches), p = plan.pp,
         v = plan.virtualStages;
  if (plan.pp == 1) {
    run.makespan = m * (forward + backward);
    run.inFlight = {1};
    return run;
  }
  pp::ScheduleOptions options;
  options.stages = static_cast<int>(plan.pp);
  options.microbatches = static_cast<int>(microbatches);
  options.virtualStages = static_cast<int>(plan.virtualStages);
  options.forwardCost = std::max(forward, 1e-12);
  options.backwardInputCost = std::max(backward / 2, 1e-12);
  options.backwardWeightCost = std::max(backward / 2, 1e-12);
  pp::ErrorOr<pp::Schedule> schedule = pp::buildSchedule(plan.schedule, options);
  if (schedule)
    run.inFlight = pp::peakInFlight(*schedule);
  if (simulate && schedule) {
    if (pp::ErrorOr<pp::Timeline> timeline = pp::simulate(*schedule, options)) {
      run.makespan = timeline->makespan;
      return run;
    }
  }
  // Equal stages: the 1F1B bubble is (p - 1) passes, a factor v shorter
  // interleaved; ZB-H1 fills all but the forwards' share.
  double bubble = plan.schedule == pp::ScheduleKind::ZeroBubble
                      ? (p - 1) * forward
                      : (p - 1) * (forward + backward) / v;
  if (plan.schedule == pp::ScheduleKind::GPipe)
    bubble = (p - 1) * (forward + backward);
  run.makespan = m * (forward + backward) + bubble;
  if (run.inFlight.empty())
    run.inFlight.assign(plan.pp, static_cast<int>(plan.pp * plan.virtualStages));
  return run;
}
} // namespace

PlanCost mlir::moe::evaluatePlan(const ModelShape &model,
                                 const ParallelPlan &plan,
                                 const ClusterSpec &cluster,
                                 int64_t globalBatch,
                                 const SoftwareTraits &sw,
                                 bool simulatePipeline) {
  const GpuSpec &gpu = cluster.gpu;
  PlanCost cost;
  cost.plan = plan;
  int64_t microbatches = globalBatch / (plan.dp * plan.microbatchSize);
  cost.microbatches = microbatches;
  double t = plan.tp, tokens = plan.microbatchSize * model.seq / plan.cp;
  double h = model.hidden, act = sw.activationBytes;

  LayerCosts dense = layerCosts(model, plan, cluster, sw, false);
  LayerCosts routed = layerCosts(model, plan, cluster, sw, true);
  // The busiest stage: the cut balances cost, so it holds its share of the
  // layers (MoE layers first, the heavier) plus the head.
  double stageLayers = std::ceil(static_cast<double>(model.layers) / plan.pp);
  double stageMoe = std::min<double>(stageLayers, model.moeLayers());
  double stageDense = stageLayers - stageMoe;
  auto sum = [&](auto field) {
    return stageMoe * field(routed) + stageDense * field(dense);
  };
  // The head: the logits GEMM (vocabulary split over tp) and the loss's
  // softmax over the vocabulary. The logits are an activation (BF16 under
  // mixed precision); the loss kernel computes in fp32 inside.
  LinearGemms head = linearGemms(gpu, {tokens, model.vocab / t, h}, false, act);
  double headStream = 3 * tokens * model.vocab * act / t / gpu.streamBytesPerSecond();

  double fwdCompute =
      sum([](const LayerCosts &c) { return c.forward.compute(); }) +
      head.forward + headStream;
  double bwdCompute =
      sum([](const LayerCosts &c) { return c.backward.compute(); }) +
      head.backward + headStream;
  double fwdTp = sum([](const LayerCosts &c) { return c.forward.tensorComm; });
  double bwdTp = sum([](const LayerCosts &c) { return c.backward.tensorComm; });
  double fwdCp =
      sum([](const LayerCosts &c) { return c.forward.contextCommExposed; });
  double bwdCp =
      sum([](const LayerCosts &c) { return c.backward.contextCommExposed; });
  double allCp = sum([](const LayerCosts &c) {
    return c.forward.contextComm + c.backward.contextComm;
  });
  double fwdEp = sum([](const LayerCosts &c) { return c.forward.expertCommExposed; });
  double bwdEp = sum([](const LayerCosts &c) { return c.backward.expertCommExposed; });
  double allEp = sum([](const LayerCosts &c) {
    return c.forward.expertComm + c.backward.expertComm;
  });
  cost.expertChunks = routed.expertChunks;
  double p2p = 0, fwdP2p = 0, bwdP2p = 0;
  if (plan.pp > 1) {
    // Neighbouring stages are tp * cp * dp ranks apart. Overlapped, a send
    // runs beside the next microbatch's compute and slows it.
    bool within = plan.tp * plan.cp * plan.dp < cluster.gpusPerNode;
    p2p = plan.virtualStages * sendSeconds(cluster, within, tokens * h * act / t);
    double contention =
        within ? cluster.nvlinkContention : cluster.networkContention;
    fwdP2p = overlapped(p2p, sw.overlapPipeline ? fwdCompute : 0, contention);
    bwdP2p = overlapped(p2p, sw.overlapPipeline ? bwdCompute : 0, contention);
  }
  double forward = fwdCompute + fwdTp + fwdEp + fwdCp + fwdP2p;
  double backward = bwdCompute + bwdTp + bwdEp + bwdCp + bwdP2p;
  cost.forwardSeconds = forward;
  cost.backwardSeconds = backward;
  double m = static_cast<double>(microbatches);
  PipelineRun run =
      runPipeline(plan, microbatches, forward, backward, simulatePipeline);
  cost.computeSeconds = m * (fwdCompute + bwdCompute);
  cost.bubbleSeconds = std::max(0.0, run.makespan - m * (forward + backward));
  cost.commSeconds["tensor-parallel all-reduce"] = m * (fwdTp + bwdTp);
  if (plan.ep > 1 && model.moeLayers() > 0)
    cost.commSeconds["expert all-to-all"] = m * allEp;
  if (plan.pp > 1)
    cost.commSeconds["pipeline send/recv"] = m * 2 * p2p;
  if (plan.cp > 1)
    cost.commSeconds["context-parallel K/V"] = m * allCp;
  // On the critical path of every microbatch, so inside the makespan.
  double passComm =
      m * (fwdTp + bwdTp + fwdEp + bwdEp + fwdCp + bwdCp + fwdP2p + bwdP2p);
  double dataParallelExposed = 0;

  // Weights per GPU on the busiest stage (its layers, plus the embedding or
  // the head).
  double perLayerDense = (model.denseParams() - 2.0 * model.vocab * h - h) /
                         model.layers;
  // One stage holds both the embedding and the head without a pipeline.
  double tables = (plan.pp == 1 ? 2.0 : 1.0) * model.vocab * h + h;
  double denseOnGpu = (stageLayers * perLayerDense + tables) / t;
  double expertOnGpu = model.moeLayers() > 0
                           ? stageMoe * model.experts * 3.0 * h * model.ffn /
                                 static_cast<double>(plan.expertTp() * plan.ep)
                           : 0;
  // Mesh axes, slowest first: dp (or fsdp), ep, cp, tp. Dense weights are
  // replicated over dp, ep and cp; experts over their replicas. FSDP
  // stores the dense weights split over all dp ranks (fsdp x ep: the ranks
  // expert parallelism borrows hold other tokens and the same weights),
  // the experts over their dp / ep replicas. Gradients are summed over cp
  // as over dp: its ranks saw other tokens.
  double denseShards = plan.fsdp ? static_cast<double>(plan.dp) : 1.0;
  int64_t epData = plan.expertDataRanks();
  double expertShards = plan.fsdp ? static_cast<double>(plan.dp / epData) : 1.0;
  CollectiveGroup denseShardGroup =
      stridedGroup(plan.dp, plan.tp * plan.cp, cluster.gpusPerNode);
  CollectiveGroup expertShardGroup = stridedGroup(
      plan.dp / epData, plan.tp * plan.cp * epData, cluster.gpusPerNode);
  CollectiveGroup denseGroup =
      stridedGroup(plan.dp * plan.cp, plan.tp, cluster.gpusPerNode);
  CollectiveGroup expertReplicas =
      stridedGroup(plan.expertReplicas(),
                   plan.expertsFolded ? plan.expertTp() * plan.ep : plan.tp,
                   cluster.gpusPerNode);
  double lastBackward = backward, firstForward = forward;
  // What the optimizer holds per GPU: ZeRO-1 shards it over the data
  // ranks (the dense weights' dp x cp, the experts' replicas; moec's over
  // dp alone, whose ranks include ep's).
  double optimizerShare = denseOnGpu + expertOnGpu;
  if (plan.zero1)
    optimizerShare =
        denseOnGpu / static_cast<double>(plan.dp * (sw.moeRun ? 1 : plan.cp)) +
        expertOnGpu / static_cast<double>(plan.expertReplicas());
  if (!plan.fsdp) {
    // Plain data parallelism all-reduces the gradients; ZeRO-1
    // reduce-scatters them and all-gathers the updated weights, behind the
    // next forward where it overlaps.
    double contention = contentionOf(cluster, denseGroup);
    if (!plan.zero1) {
      double reduce =
          allReduceSeconds(cluster, denseGroup, denseOnGpu * sw.gradientBytes) +
          allReduceSeconds(cluster, expertReplicas,
                           expertOnGpu * sw.gradientBytes);
      cost.commSeconds["data-parallel all-reduce"] = reduce;
      dataParallelExposed = overlapped(
          reduce, sw.overlapDataParallel ? lastBackward : 0, contention);
    } else {
      auto gathered = [&](double bytes) {
        return allGatherSeconds(cluster, denseGroup, denseOnGpu * bytes) +
               allGatherSeconds(cluster, expertReplicas, expertOnGpu * bytes);
      };
      double scatter = gathered(sw.gradientBytes);
      double gather = gathered(sw.weightBytes);
      cost.commSeconds["zero-1 reduce-scatter"] = scatter;
      cost.commSeconds["zero-1 all-gather"] = gather;
      // moe-run gathers the updated weights inside its optimizer, before
      // the next step: nothing hides them.
      bool gatherOverlaps = sw.overlapDataParallel && !sw.moeRun;
      dataParallelExposed =
          overlapped(scatter, sw.overlapDataParallel ? lastBackward : 0,
                     contention) +
          overlapped(gather, gatherOverlaps ? firstForward : 0, contention);
    }
  } else {
    // Weights gathered for the forward and again for the backward of each
    // microbatch, or, pipelined, once per step and kept for all of them;
    // gradients reduce-scattered once, as the optimizer reads them. moe-run
    // gathers them in each microbatch's forward and keeps them in that
    // microbatch's arena until its backward, pipelined or not.
    double gather = allGatherSeconds(cluster, denseShardGroup,
                                     denseOnGpu * sw.weightBytes) +
                    allGatherSeconds(cluster, expertShardGroup,
                                     expertOnGpu * sw.weightBytes);
    double scatter = allGatherSeconds(cluster, denseShardGroup,
                                      denseOnGpu * sw.gradientBytes) +
                     allGatherSeconds(cluster, expertShardGroup,
                                      expertOnGpu * sw.gradientBytes);
    // The shards summed over cp too (moec reduce-scatters over fsdp, then
    // all-reduces over cp).
    if (plan.cp > 1)
      scatter += allReduceSeconds(
          cluster, stridedGroup(plan.cp, plan.tp, cluster.gpusPerNode),
          (denseOnGpu / denseShards + expertOnGpu / expertShards) *
              sw.gradientBytes);
    double gathers = sw.moeRun ? m : plan.pp > 1 ? 1.0 : 2 * m;
    cost.commSeconds["fsdp all-gather"] = gathers * gather;
    cost.commSeconds["fsdp reduce-scatter"] = scatter;
    double contention = contentionOf(cluster, denseShardGroup);
    double gatherExposed, scatterExposed;
    if (sw.overlapDataParallel) {
      // Prefetched a layer ahead: only the first layer's gather, and what
      // outlasts the compute, shows; the rest slows the compute.
      double perPass = gather / std::max(stageLayers, 1.0);
      double forwardGather =
          perPass + overlapped(gather, fwdCompute, contention);
      if (sw.moeRun)
        gatherExposed = m * forwardGather;
      else if (plan.pp > 1)
        gatherExposed = forwardGather;
      else
        gatherExposed = m * (forwardGather + perPass +
                             overlapped(gather, bwdCompute, contention));
      scatterExposed = overlapped(scatter, lastBackward, contention);
    } else {
      gatherExposed = gathers * gather;
      scatterExposed = scatter;
    }
    dataParallelExposed = gatherExposed + scatterExposed;
  }
  cost.exposedCommSeconds = passComm + dataParallelExposed;

  // AdamW streams weights (read, write), the gradient and both moments of
  // the GPU's shard.
  double onGpu = denseOnGpu / denseShards + expertOnGpu / expertShards;
  double optimizerOnGpu = plan.fsdp ? onGpu : optimizerShare;
  cost.optimizerSeconds =
      optimizerOnGpu * sw.optimizerStreamBytes() / gpu.streamBytesPerSecond();

  cost.stepSeconds = run.makespan + dataParallelExposed + cost.optimizerSeconds;
  double gpus = static_cast<double>(plan.gpus());
  double stepTokens = static_cast<double>(globalBatch) * model.seq;
  cost.tokensPerSecondPerGpu = stepTokens / cost.stepSeconds / gpus;
  cost.mfu = model.modelFlopsPerToken() * stepTokens /
             (cost.stepSeconds * gpus * gpu.peakFlops(false));

  // Memory: weights (and, with FSDP, two gathered stages' worth of layers
  // at once: the one computing and the one prefetched), gradients,
  // optimizer state; activations of the microbatches in flight. Pipelined,
  // FSDP keeps the stage's weights gathered and accumulates its gradients
  // unsharded over the microbatches, reduce-scattering them once.
  cost.weightMemory = onGpu * sw.weightBytes;
  cost.gradientMemory = onGpu * sw.gradientBytes;
  int firstInFlight = run.inFlight.empty() ? 1 : run.inFlight.front();
  int lastInFlight = run.inFlight.empty() ? 1 : run.inFlight.back();
  if (plan.fsdp) {
    // moe-run keeps each gathered weight from its forward to its backward
    // in the microbatch's arena: the stage's whole weights once for each
    // microbatch in flight. With several microbatches it runs the step as
    // a pipeline (of one stage without pp), which sums the gradients
    // unsharded and reduce-scatters them once.
    double whole = denseOnGpu + expertOnGpu;
    double copies = sw.moeRun     ? firstInFlight
                    : plan.pp > 1 ? 1.0
                                  : 2 / std::max(stageLayers, 1.0);
    cost.weightMemory += whole * sw.weightBytes * copies;
    if (plan.pp > 1 || (sw.moeRun && microbatches > 1))
      cost.gradientMemory = whole * sw.gradientBytes;
  }
  cost.optimizerMemory = optimizerOnGpu * sw.optimizerBytes;
  double perChunk =
      (stageMoe * routed.keptBytes + stageDense * dense.keptBytes) /
      plan.virtualStages;
  double working = plan.remat == Remat::Full
                       ? std::max(routed.fullBytes, dense.fullBytes)
                       : 0.0;
  // A GPU no cuda target describes is the cpu backend's (cpu-local.yaml).
  bool cpuBackend = capabilitiesOf(gpu) == nullptr;
  // The logits and their gradient, in the activations' dtype, on the last
  // stage; moe-run's cpu backend fuses the head with the loss and keeps
  // none (its scratch is the workspace below).
  double logits =
      sw.moeRun && cpuBackend ? 0.0 : 2 * tokens * model.vocab * act / t;
  cost.activationMemory = std::max(firstInFlight * perChunk,
                                   lastInFlight * perChunk + logits) +
                          working;
  // Kernel scratch outside the plan: a flat GiB for another software; for
  // moe-run, its backend's own. On the cuda backend at least the experts'
  // backward scratch of a microbatch (moe/Runtime/Cuda/Workspace.h; every
  // token of the microbatch, as without sequence parallelism). On the cpu
  // backend the largest of the experts', attention's and the fused loss's
  // scratch (moe/Runtime/Cpu/Kernels.h), as the compiled plan counts it.
  // Expert parallel, it is counted for twice a balanced share of the
  // group's slots arriving, where the compiled plan counts the worst case
  // (all of them): routing is never balanced, but a plan sized for every
  // slot of 32 ranks meeting on one would fit nothing.
  bool moeLayers = stageMoe > 0 && model.experts > 1;
  int64_t arriving = std::min<int64_t>(plan.ep, 2);
  double workspace = 1024.0 * 1024 * 1024;
  if (sw.moeRun && cpuBackend) {
    int64_t rows = static_cast<int64_t>(tokens);
    double attention =
        static_cast<double>(::moe::rt::cpu::attentionWorkspaceBytes(
            model.headDim > 0 ? model.headDim : model.hidden / model.heads,
            /*backward=*/true));
    double loss = static_cast<double>(
        ::moe::rt::cpu::linearCrossEntropyWorkspaceBytes(rows, model.vocab));
    double experts =
        moeLayers ? static_cast<double>(::moe::rt::cpu::expertsWorkspaceBytes(
                        rows, model.topK, model.hidden, model.ffn,
                        /*backward=*/true, plan.fp8, arriving))
                  : 0.0;
    workspace = std::max({attention, loss, experts});
  } else if (sw.moeRun && moeLayers) {
    ::moe::rt::cuda::ExpertsScratchShape experts;
    experts.tokens = static_cast<int64_t>(tokens);
    experts.topK = model.topK;
    experts.hidden = model.hidden;
    experts.ffn = model.ffn;
    experts.experts = std::max<int64_t>(model.experts / plan.ep, 1);
    experts.backward = true;
    experts.bf16 = act < 4;
    experts.fp8 = plan.fp8;
    experts.groupSize = plan.ep > 1 ? arriving : 0;
    // FP8 dispatch compiles with the default block (CompileFlags).
    if (plan.ep > 1 && plan.fp8 && sw.fp8Dispatch)
      experts.fp8DispatchBlock = CompileFlags().fp8Block;
    workspace = std::max(
        workspace,
        static_cast<double>(::moe::rt::cuda::kGemmWorkspaceBytes +
                            ::moe::rt::cuda::expertsWorkspaceBytes(experts)));
  }
  // moe-run packs gradients and activations into one arena: the backward
  // frees a layer's activations as it writes its gradients. With one
  // microbatch (nothing accumulates) the arena holds the larger of the two
  // and half the smaller: the share bench/cpu-memory.sh measures on the CPU
  // meshes (bench/RESULTS.md).
  double activationsAndGradients =
      sw.moeRun && microbatches == 1
          ? std::max(cost.gradientMemory, cost.activationMemory) +
                0.5 * std::min(cost.gradientMemory, cost.activationMemory)
          : cost.gradientMemory + cost.activationMemory;
  cost.workspaceMemory = workspace;
  cost.peakMemory = cost.weightMemory + cost.optimizerMemory +
                    activationsAndGradients + workspace;
  // The rest is the CUDA context, NCCL's buffers and fragmentation.
  cost.fits = cost.peakMemory <= 0.92 * gpu.memoryBytes();
  return cost;
}
