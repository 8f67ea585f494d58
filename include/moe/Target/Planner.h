//===- Planner.h - the parallelism plan search ------------------*- C++ -*-===//
//
// `moec --plan` (issue 8): chooses tp, pp (and virtual stages), ep, dp or
// fsdp, the microbatch size, the rematerialization policy and FP8 for a
// model on a cluster, from an analytical model of one training step per
// GPU:
//   * compute per layer by the roofline with the GPU's fitted efficiencies
//     (GEMMs at tensor-core FLOP/s, the rest at HBM bandwidth);
//   * tensor-parallel all-reduces, expert all-to-alls, pipeline sends and
//     data-parallel / FSDP collectives by the hierarchical ring model
//     (Collectives.h), overlapped where the software overlaps them;
//   * the pipeline by replaying the schedule (moe::pipeline::simulate) with
//     the stage's forward and backward times;
//   * memory per GPU: weights, gradients and optimizer state (sharded by
//     tp, pp, ep and fsdp), the activations of the microbatches the
//     schedule keeps in flight, and the logits.
// The same model predicts published runs (bench/published/), whose
// software traits (attention kernel, overlap) are given with them.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_PLANNER_H
#define MOE_TARGET_PLANNER_H

#include "moe/Pipeline/Schedule.h"
#include "moe/Runtime/Capabilities.h"
#include "moe/Target/Hardware.h"
#include "moe/Transforms/PrecisionRecipe.h"

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// A decoder-only transformer's sizes, from its moe.transformer.
struct ModelShape {
  std::string name;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0;
  /// The head dimension (0: hidden / heads).
  int64_t headDim = 0;
  /// Qwen3's per-head query and key norms (two weights of the head
  /// dimension per layer).
  bool qkNorm = false;
  /// The LM head is the embedding table (one vocab x hidden weight).
  bool tiedEmbeddings = false;
  /// Multi-head latent attention's widths (kvLoraRank 0: none; qLoraRank
  /// 0: a plain query projection).
  int64_t qLoraRank = 0, kvLoraRank = 0, ropeHeadDim = 0, nopeHeadDim = 0,
          valueHeadDim = 0;
  bool latentAttention() const { return kvLoraRank > 0; }
  /// Attention's weights of one layer that tensor parallelism splits
  /// (q, k, v, o; MLA's up-projections and o) and those it keeps whole
  /// (MLA's down-projections and their norms).
  double attentionSplitParams() const;
  double attentionWholeParams() const;
  /// The widths, over all heads, of the scores' and the weighted sum's
  /// dot products: a token's attention core is 2 * seq * this FLOPs
  /// without the causal half.
  double attentionCoreWidth() const;
  /// The query and key/value projections' widths.
  double queryWidth() const { return static_cast<double>(heads) * dim(); }
  double kvWidth() const { return static_cast<double>(kvHeads) * dim(); }
  /// MoE layers: `experts` SwiGLU experts of width `ffn`, top_k per token,
  /// and a shared SwiGLU MLP of width `sharedFfn` every token runs (0:
  /// none; DeepSeek's shared experts).
  int64_t experts = 1, topK = 1, ffn = 0, sharedFfn = 0;
  /// Dense layers (SwiGLU of width denseFfn).
  int64_t denseLayers = 0, denseFfn = 0;
  int64_t seq = 0;

  int64_t moeLayers() const { return layers - denseLayers; }
  /// Weights outside the routed experts (attention, norms, routers, dense
  /// and shared MLPs, embedding and head), and the routed experts'.
  double denseParams() const;
  double expertParams() const;
  double totalParams() const { return denseParams() + expertParams(); }
  /// Model FLOPs of one token, forward and backward (3x the forward's
  /// matmuls, no recomputation), causal attention counted half: the
  /// numerator of MFU.
  double modelFlopsPerToken() const;

private:
  int64_t dim() const {
    return headDim > 0 ? headDim : heads > 0 ? hidden / heads : 0;
  }
};

/// The shape of the module's moe.transformer; an error (emitted at the
/// module) when there is none.
FailureOr<ModelShape> modelShapeOf(ModuleOp module);

enum class Remat {
  None,
  /// Attention's core (scores and softmax) is recomputed, the rest kept.
  Selective,
  /// Each layer keeps only its input and recomputes the rest.
  Full,
};
const char *toString(Remat remat);

struct ParallelPlan {
  int64_t tp = 1, pp = 1, virtualStages = 1;
  /// Context parallelism: the sequence split over cp ranks (load-balanced),
  /// attention gathering its keys and values over them.
  int64_t cp = 1;
  /// Data-parallel replicas of the dense weights (all GPUs / (tp pp)); the
  /// experts are split over `ep` of them.
  int64_t dp = 1, ep = 1;
  /// Weights, gradients and optimizer state sharded over the fsdp axis
  /// (dp / ep ranks) instead of replicated.
  bool fsdp = false;
  /// ZeRO-1 (Megatron's distributed optimizer): the optimizer state and the
  /// fp32 masters sharded over the data-parallel ranks, the weights and
  /// gradients not; gradients are reduce-scattered and the updated weights
  /// all-gathered.
  bool zero1 = false;
  /// Expert tensor parallelism: the experts' width split over etp ranks (0:
  /// over tp, as attention's).
  int64_t etp = 0;
  /// Where the expert-parallel ranks sit. moec's mesh (false): ep is an
  /// axis of the data ranks, outside cp and tp, so its ranks are tp x cp
  /// apart. MoE parallel folding (Megatron-Core, true): within a stage the
  /// ranks are etp x ep x expert-dp, etp fastest, so an ep group is etp
  /// apart (consecutive with etp 1, inside a node when it fits) and may
  /// span attention's tp and cp ranks.
  bool expertsFolded = false;
  int64_t microbatchSize = 1;
  Remat remat = Remat::None;
  /// FP8 GEMMs where the GPU has FP8 tensor cores; FP8 expert dispatch.
  bool fp8 = false;
  ::moe::pipeline::ScheduleKind schedule = ::moe::pipeline::ScheduleKind::OneFOneB;

  int64_t gpus() const { return tp * pp * cp * dp; }
  int64_t expertTp() const { return etp > 0 ? etp : tp; }
  /// The distance between the ranks of an ep group.
  int64_t expertStride() const { return expertsFolded ? expertTp() : tp * cp; }
  /// A stage's replicas of each expert: the ranks of a stage over those
  /// that split the experts.
  int64_t expertReplicas() const {
    return expertsFolded ? tp * cp * dp / (expertTp() * ep) : cp * dp / ep;
  }
  /// The data ranks the experts' ep group spans: ep, or, folded over tp
  /// (etp 1), ep / tp (the rest of the group is the tp ranks).
  int64_t expertDataRanks() const {
    return expertsFolded && expertTp() == 1 && tp > 1 && ep % tp == 0 ? ep / tp
                                                                      : ep;
  }
  /// moec compiles the folding over tp (--fold-experts=tp) that has etp 1,
  /// no cp, and ep a multiple of tp whose data part divides dp.
  bool foldedOverTp() const {
    return expertsFolded && expertTp() == 1 && tp > 1 && cp == 1 &&
           ep % tp == 0 && dp % (ep / tp) == 0;
  }
  /// moec's --mesh for this plan (without pp).
  std::string meshSpec() const;
  std::string describe() const;
};

/// How the software running the plan behaves, where runtimes differ.
/// moec's own: fused attention, gradient reductions on the communication
/// stream, FP8 for the experts only, and the bytes of the precision the
/// step is compiled in (withPrecision).
struct SoftwareTraits {
  /// The plan runs on moe-run, so the search keeps only plans the backend
  /// of the GPU's target runs (its capability record); false predicts
  /// another software's run (bench/published).
  bool moeRun = true;
  /// The kernel attention runs in: a fused one of the GPU's list
  /// (flash2, flash3, cudnn, moe-run; hardware/gpus.yaml), whose scores
  /// never reach HBM, or "unfused": batched GEMMs over the whole square,
  /// whose b x heads x s x s scores separate kernels write and read.
  std::string attentionKernel = "moe-run";
  bool fusedAttention() const { return attentionKernel != "unfused"; }
  /// The expert all-to-all of one microbatch overlaps the whole layer's
  /// compute of another (Megatron-Core's batch-level overlap,
  /// --overlap-moe-expert-parallel-comm), not only its own expert GEMMs.
  bool batchLevelExpertOverlap = false;
  /// The expert dispatch sends a token bound for several ranks of another
  /// node across the network once (DeepEP, HybridEP), not once per rank
  /// (NCCL's all-to-all, moe-run's).
  bool dedupedDispatch = false;
  /// The busiest expert-parallel rank's routed rows over the mean (1:
  /// balanced; a capacity factor bounds it).
  double expertImbalance = 1.0;
  /// Pipeline sends and receives overlap the stage's compute (Megatron's
  /// --overlap-p2p-comm), which they slow; otherwise they wait.
  bool overlapPipeline = false;
  /// Data-parallel gradient reductions overlap the backward pass; FSDP
  /// gathers overlap the layers before them.
  bool overlapDataParallel = true;
  /// Tensor-parallel collectives overlap their GEMMs (async TP).
  bool overlapTensorParallel = false;
  /// Context parallelism's keys and values travel around a ring while
  /// attention computes (ring attention, Megatron's and TorchTitan's
  /// default), rather than all-gathered before it (moe-run's today).
  bool overlapContextParallel = false;
  /// Element-wise steps (norms, activations, residuals) run as fused
  /// kernels (a compiler, or hand-written ones), not one kernel per
  /// operator as in eager PyTorch.
  bool fusedElementwise = true;
  /// The expert all-to-all can go in chunks, each overlapping the expert
  /// GEMMs of the one before (moe-run --expert-chunks).
  bool chunkedExpertExchange = true;
  /// FP8 applies to every linear layer, not only the experts.
  bool fp8AllLinears = false;
  /// With FP8, expert-parallel tokens travel as FP8 codes.
  bool fp8Dispatch = true;
  /// Bytes per weight element of the copy the GEMMs read (and FSDP
  /// gathers), of a gradient (as reduced), and of optimizer state per
  /// weight (the moments, and the fp32 master where the GEMMs read a BF16
  /// working copy). The defaults are an fp32 step's.
  double weightBytes = 4, gradientBytes = 4, optimizerBytes = 8;
  /// Bytes per activation element, and so per element of the messages
  /// that carry activations (tensor-parallel, expert and pipeline).
  double activationBytes = 4;
  /// The precision the bytes above come from (withPrecision), or none
  /// where --plan-software gives them (another software's run).
  std::optional<PrecisionRecipe> precision;

  /// Bytes AdamW reads and writes per parameter: the master (read and
  /// written), the gradient, both moments (read and written), and the
  /// working copy it rounds the master into.
  double optimizerStreamBytes() const;
};

/// `software` with the bytes of a step compiled in `recipe`: per parameter
/// the fp32 master, two fp32 moments, the BF16 working copy the GEMMs read
/// (none in fp32: they read the master) and the gradient as reduced; per
/// activation element its dtype's bytes.
SoftwareTraits withPrecision(SoftwareTraits software,
                             const PrecisionRecipe &recipe);

/// "bf16, fp32 gradient reductions: per parameter 4 master + 8 moments + 2
/// working copy + 4 gradient = 18 bytes; activations and messages 2 bytes
/// per element", or the bytes as given for another software's run.
std::string describeBytes(const SoftwareTraits &software);

/// The predicted step of one plan, per GPU (the busiest pipeline stage).
struct PlanCost {
  ParallelPlan plan;
  int64_t microbatches = 0;
  /// Seconds of one microbatch's forward and backward on the stage
  /// (compute and the communication on their critical path).
  double forwardSeconds = 0, backwardSeconds = 0;
  /// Of the step: compute, pipeline bubble, communication per kind and
  /// the part of it exposed, the optimizer.
  double computeSeconds = 0, bubbleSeconds = 0, optimizerSeconds = 0;
  std::map<std::string, double> commSeconds;
  double exposedCommSeconds = 0;
  double stepSeconds = 0;
  double tokensPerSecondPerGpu = 0, mfu = 0;
  /// Bytes per GPU.
  double weightMemory = 0, gradientMemory = 0, optimizerMemory = 0,
         activationMemory = 0, workspaceMemory = 0, peakMemory = 0;
  bool fits = false;
  /// The expert exchange's chunk count that hides the most of it.
  int64_t expertChunks = 1;
};

/// Why a plan cannot run at all (sizes do not divide), or none.
std::optional<std::string> checkPlan(const ModelShape &model,
                                     const ParallelPlan &plan,
                                     int64_t globalBatch);

/// Why moec cannot compile `plan` as planned (ZeRO-1, experts folded over
/// tp or split apart from it: another software's placements), or none.
std::optional<std::string> checkCompilable(const ParallelPlan &plan);

/// Why `backend` (a target's capability record) cannot run `plan` as moec
/// compiles it, naming the capability it lacks, or none.
std::optional<std::string>
checkRunnable(const ModelShape &model, const ParallelPlan &plan,
              int64_t globalBatch, const GpuSpec &gpu,
              const ::moe::caps::Capabilities &backend);

/// `software` without what `backend` lacks: chunked expert exchanges,
/// overlapped gradient reductions, FP8 dispatch. A precision is not
/// something to leave out: checkPrecisionRunnable refuses one whose dtypes
/// the backend does not hold.
SoftwareTraits limitToBackend(SoftwareTraits software,
                              const ::moe::caps::Capabilities &backend);

/// Why `backend` cannot run a step compiled in `recipe` (a dtype missing
/// from its record's `dtypes`), or none.
std::optional<std::string>
checkPrecisionRunnable(const PrecisionRecipe &recipe,
                       const ::moe::caps::Capabilities &backend);

/// The recipe a plan's FP8 expert GEMMs are compiled with on `backend`:
/// blockwise where it runs every GEMM in FP8 (moec's default), else
/// tensorwise, else delayed, else blockwise; empty where it runs none.
std::string fp8RecipeOf(const ::moe::caps::Capabilities &backend);

/// Predicts `plan` for a global batch of `globalBatch` sequences; the plan
/// must pass checkPlan. `simulatePipeline` replays the schedule for the
/// bubble (otherwise its closed form for equal stages is used).
PlanCost evaluatePlan(const ModelShape &model, const ParallelPlan &plan,
                      const ClusterSpec &cluster, int64_t globalBatch,
                      const SoftwareTraits &software,
                      bool simulatePipeline = true);

/// What the search may choose; an unset field is searched, a set one fixed.
struct PlanConstraints {
  std::optional<int64_t> tp, pp, virtualStages, ep, etp, cp, microbatchSize;
  std::optional<bool> fsdp, zero1, fp8;
  std::optional<Remat> remat;
  std::optional<::moe::pipeline::ScheduleKind> schedule;
  /// Keep plans over memory too (to predict a published run whose memory
  /// the model overestimates); they are marked.
  bool keepOverMemory = false;
  /// Only placements moec compiles (no ZeRO-1, no folded experts), also
  /// for another software's run when the plan is to be compiled.
  bool moecPlacements = false;
  /// Only plans this backend runs (moec's own runtime); null for any
  /// (predicting another software's runs).
  const ::moe::caps::Capabilities *backend = nullptr;
};

/// Parses "tp=8,pp=4,vpp=2,ep=8,cp=2,mb=1,fsdp=1,remat=full,fp8=0,
/// schedule=interleaved"; an error names the bad entry.
FailureOr<PlanConstraints> parsePlanConstraints(llvm::StringRef text,
                                                std::string &error);

/// Parses "attention=unfused,dp-overlap=0,tp-overlap=1,fp8=linears,
/// weight-bytes=2,gradient-bytes=2,optimizer-bytes=12,activation-bytes=2"
/// over moec's defaults with the bytes of `precision`; an error names the
/// bad entry. The byte keys describe another software's run
/// (runtime=other): moe-run's bytes are those of the compiled precision.
FailureOr<SoftwareTraits>
parseSoftwareTraits(llvm::StringRef text, std::string &error,
                    const PrecisionRecipe &precision = PrecisionRecipe());

struct PlanSearchResult {
  /// The best plans that fit, fastest first.
  std::vector<PlanCost> best;
  int64_t considered = 0, rejectedMemory = 0;
  /// Considered plans the backend (PlanConstraints::backend) cannot run,
  /// and the first one's reason.
  int64_t rejectedBackend = 0;
  std::string backendReason;
  const ::moe::caps::Capabilities *backend = nullptr;
  /// The software the plans were predicted for (limited to the backend).
  SoftwareTraits software;
};

/// Searches the plans for `gpus` GPUs of `cluster`, keeping the `keep`
/// fastest that fit memory.
PlanSearchResult searchPlans(const ModelShape &model, const ClusterSpec &cluster,
                             int64_t gpus, int64_t globalBatch,
                             const PlanConstraints &constraints,
                             const SoftwareTraits &software, size_t keep);

/// `moec --plan`'s table.
void printPlans(const PlanSearchResult &result, const ModelShape &model,
                const ClusterSpec &cluster, int64_t gpus, int64_t globalBatch,
                llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_TARGET_PLANNER_H
