//===- Capabilities.h - what each target's backend runs ---------*- C++ -*-===//
//
// The one record of what a target can run, per target and the backend that
// runs it: the compiler (moe-fp8, the planner, the cost model, --report)
// and the runtime's load-time check (Artifact/Capabilities.h) read this
// table, so that what moec proposes and what moe-run accepts cannot drift
// apart. It is a constexpr table in a header on purpose: the runtime links
// neither LLVM nor MLIR and reads no data file at run time.
//
// A record states what the backend really runs today, not what the chip
// could do: a capability lands here with the kernels that use it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CAPABILITIES_H
#define MOE_RUNTIME_CAPABILITIES_H

#include "moe/Runtime/Program.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace moe::caps {

/// The expert GEMMs' FP8 scaling recipes: the op table's fp8_scaling enum
/// (Artifact/OpTable.td), whose None is full-precision GEMMs.
using Fp8Recipe = rt::Fp8Scaling;
inline constexpr Fp8Recipe kFp8Recipes[] = {
    Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise, Fp8Recipe::Delayed};

/// The recipe's name, as moec's --fp8-scaling spells it.
constexpr std::string_view fp8RecipeName(Fp8Recipe recipe) {
  switch (recipe) {
  case Fp8Recipe::None:
    return "none";
  case Fp8Recipe::Tensorwise:
    return "tensorwise";
  case Fp8Recipe::Blockwise:
    return "blockwise";
  case Fp8Recipe::Delayed:
    return "delayed";
  }
  return "?";
}

constexpr uint8_t recipeBit(Fp8Recipe recipe) {
  return static_cast<uint8_t>(1u << static_cast<unsigned>(recipe));
}
constexpr uint32_t dtypeBit(rt::DType dtype) {
  return 1u << static_cast<unsigned>(dtype);
}

/// The capabilities' names, as errors and reports print them.
inline constexpr std::string_view kFp8RecipesName = "fp8_recipes";
inline constexpr std::string_view kFp8DispatchName = "fp8_dispatch";
inline constexpr std::string_view kFp8GemmAlignmentName = "fp8_gemm_alignment";
inline constexpr std::string_view kPipelineStagesName = "pipeline_stages";
inline constexpr std::string_view kMicrobatchesName = "microbatches";
inline constexpr std::string_view kExpertChunksName = "expert_chunks";
inline constexpr std::string_view kAsyncCollectivesName = "async_collectives";
inline constexpr std::string_view kDtypesName = "dtypes";
inline constexpr std::string_view kFp8BlockName = "fp8_block";
inline constexpr std::string_view kLinearCrossEntropyName =
    "linear_cross_entropy";
inline constexpr std::string_view kGemmEpiloguesName = "gemm_epilogues";
inline constexpr std::string_view kScoredRoutersName = "scored_routers";
inline constexpr std::string_view kRouterLossesName = "router_losses";
inline constexpr std::string_view kLatentAttentionName = "latent_attention";
inline constexpr std::string_view kStageSharedParametersName =
    "stage_shared_parameters";
inline constexpr std::string_view kDocumentMaskingName = "document_masking";
inline constexpr std::string_view kContextParallelName = "context_parallel";
inline constexpr std::string_view kShardedOptimizerName = "sharded_optimizer";
inline constexpr std::string_view kScaledRopeName = "scaled_rope";

struct Capabilities {
  /// The target (moec --target) and the backend that runs it (moe-run
  /// --device).
  std::string_view target, backend;
  /// The CUDA compute capability times ten (90 for sm_90); 0 for the CPU.
  int computeCapability = 0;
  /// The FP8 recipes the expert GEMMs run (recipeBit per recipe); none
  /// where GEMMs cannot read FP8.
  uint8_t fp8Recipes = 0;
  /// Expert-parallel tokens sent as FP8 codes.
  bool fp8Dispatch = false;
  /// FP8 expert GEMMs need hidden and ffn widths that are multiples of
  /// this (1: any width).
  int64_t fp8GemmAlignment = 1;
  /// A step cut into pipeline stages over a "pp" mesh axis.
  bool pipelineStages = false;
  /// A step over several microbatches (gradient accumulation).
  bool microbatches = false;
  /// The expert exchange in chunks overlapping the expert GEMMs (moe-run
  /// --expert-chunks).
  bool expertChunks = false;
  /// Gradient reductions overlapping the backward (moe-run
  /// --async-collectives on the CPU; always on the CUDA backend's
  /// communication stream).
  bool asyncCollectives = false;
  /// The buffer dtypes it holds (dtypeBit per dtype).
  uint32_t dtypes = 0;
  /// The block of blockwise FP8 GEMMs (--fp8-block) it runs: 0 for any,
  /// else that one (cuBLASLt's block scaling on Hopper is 1 x 128 and
  /// 128 x 128).
  int64_t fp8Block = 0;
  /// The LM head fused with its cross-entropy (LinearCrossEntropy and its
  /// gradient): moe-fuse-linear-cross-entropy forms it only where this
  /// holds.
  bool linearCrossEntropy = false;
  /// GEMMs that add their product to an addend (LinearAccumulate,
  /// LinearGradInputAccumulate): moe-fuse-gemm-epilogues forms them only
  /// where this holds.
  bool gemmEpilogues = false;
  /// Routers other than HF Mixtral's (ScoredRouter and its gradient:
  /// sigmoid scores, a selection bias, group-limited top-k, weights not
  /// renormalised or scaled), which have no other lowering, and the
  /// per-expert load counters that balance a selection bias and report
  /// the load (ExpertLoad, ExpertLoadUpdate).
  bool scoredRouters = false;
  /// DeepSeek-V3's sequence-wise balance loss and the router z-loss
  /// (SequenceAuxLoss, ZLoss and their gradients).
  bool routerLosses = false;
  /// Multi-head latent attention's pieces: attention with a value head
  /// dim of its own and per-head concatenation (AttentionValueDim,
  /// ConcatHeads, SplitHeads).
  bool latentAttention = false;
  /// A parameter two pipeline stages hold (tied embeddings under pipeline
  /// stages), whose gradient halves the stages exchange in the optimizer
  /// (PipelineGradientSum).
  bool stageSharedParameters = false;
  /// Document masking: RoPE and attention at each token's position in its
  /// document (DocumentRope, DocumentAttention and their gradients).
  bool documentMasking = false;
  /// Context parallelism: a sequence split over a "cp" mesh axis,
  /// load-balanced (collectives along it, and RoPE and attention on a
  /// rank's block of it).
  bool contextParallel = false;
  /// ZeRO-1: optimizer state split over the data ranks while the weights
  /// stay whole, gathered after each update (ShardedAdamW).
  bool shardedOptimizer = false;
  /// Scaled RoPE (linear, YaRN, llama3 frequencies and YaRN's attention
  /// factor: the rope opcodes' rope_scaling set) and attention with a
  /// softmax scale factor (YaRN's mscale_all_dim).
  bool scaledRope = false;

  constexpr bool hasRecipe(Fp8Recipe recipe) const {
    return (fp8Recipes & recipeBit(recipe)) != 0;
  }
  /// Whether GEMMs can read FP8 inputs at all.
  constexpr bool fp8Gemms() const { return fp8Recipes != 0; }
  constexpr bool hasDtype(rt::DType dtype) const {
    return (dtypes & dtypeBit(dtype)) != 0;
  }
  /// Whether blockwise FP8 GEMMs of `block` run.
  constexpr bool runsFp8Block(int64_t block) const {
    return fp8Block == 0 || fp8Block == block;
  }
  /// The share of the experts' backward GEMM work that blockwise FP8 runs
  /// in FP8: all of it where the scales may follow any layout (the CPU's
  /// emulation); 5 of its 8 GEMMs on hardware block scaling (a fixed
  /// block), which scales along k: the three weight gradients sum over the
  /// tokens, across the blocks, and run in BF16. With the up projections
  /// saved, the backward runs 6 GEMMs, 3 of them in FP8.
  constexpr double blockwiseBackwardFp8Share(bool savedUp = false) const {
    if (fp8Block == 0)
      return 1.0;
    return savedUp ? 3.0 / 6.0 : 5.0 / 8.0;
  }
};

inline constexpr uint8_t kAllRecipes = recipeBit(Fp8Recipe::Tensorwise) |
                                       recipeBit(Fp8Recipe::Blockwise) |
                                       recipeBit(Fp8Recipe::Delayed);
inline constexpr uint32_t kF32I32 =
    dtypeBit(rt::DType::F32) | dtypeBit(rt::DType::I32);
/// Mixed precision (docs/precision.md) stores BF16 activations and working
/// copies; both backends keep them in BF16.
inline constexpr uint32_t kF32I32BF16 = kF32I32 | dtypeBit(rt::DType::BF16);

/// The CPU backend runs everything the compiler emits, FP8 emulated bit
/// exactly (so it runs every target's artifacts). The CUDA backend
/// (lib/Runtime/Cuda): tensorwise, delayed and blockwise FP8 on sm_90
/// (blockwise through cuBLASLt's 1 x 128 and 128 x 128 block scaling, so
/// blocks of 128 only), widths that are multiples of 16; pipelines
/// and microbatches through the shared runner (engine::PipelineStep); FP8
/// token dispatch (cpu::packFp8Row's rows); expert exchanges in chunks
/// pipelined over the compute and communication streams; gradient
/// reductions always on the communication stream. The fused LM head and
/// cross-entropy and the GEMMs with epilogue addends run on the CPU only;
/// GPU targets keep those ops unfused. Routers other than Mixtral's and the
/// sequence-wise and z router losses, multi-head latent attention, a
/// parameter shared by two pipeline stages, document masking and context
/// parallelism, ZeRO-1's sharded optimizer and scaled RoPE run on the CPU
/// only, and the CUDA backend refuses them at load.
inline constexpr Capabilities kCapabilities[] = {
    {"cpu",
     "cpu",
     0,
     kAllRecipes,
     /*fp8Dispatch=*/true,
     /*fp8GemmAlignment=*/1,
     /*pipelineStages=*/true,
     /*microbatches=*/true,
     /*expertChunks=*/true,
     /*asyncCollectives=*/true,
     kF32I32BF16,
     /*fp8Block=*/0,
     /*linearCrossEntropy=*/true,
     /*gemmEpilogues=*/true,
     /*scoredRouters=*/true,
     /*routerLosses=*/true,
     /*latentAttention=*/true,
     /*stageSharedParameters=*/true,
     /*documentMasking=*/true,
     /*contextParallel=*/true,
     /*shardedOptimizer=*/true,
     /*scaledRope=*/true},
    {"a100", "cuda", 80, /*fp8Recipes=*/0, /*fp8Dispatch=*/true,
     /*fp8GemmAlignment=*/16, /*pipelineStages=*/true,
     /*microbatches=*/true, /*expertChunks=*/true,
     /*asyncCollectives=*/true, kF32I32BF16},
    {"h100", "cuda", 90, kAllRecipes, /*fp8Dispatch=*/true,
     /*fp8GemmAlignment=*/16, /*pipelineStages=*/true, /*microbatches=*/true,
     /*expertChunks=*/true, /*asyncCollectives=*/true, kF32I32BF16,
     /*fp8Block=*/128},
    {"h200", "cuda", 90, kAllRecipes, /*fp8Dispatch=*/true,
     /*fp8GemmAlignment=*/16, /*pipelineStages=*/true, /*microbatches=*/true,
     /*expertChunks=*/true, /*asyncCollectives=*/true, kF32I32BF16,
     /*fp8Block=*/128},
};

/// The backends moe-run --device names.
inline constexpr std::string_view kBackends[] = {"cpu", "cuda"};

/// The record of `target` on its own backend, or null for an unknown one.
constexpr const Capabilities *targetCapabilities(std::string_view target) {
  for (const Capabilities &record : kCapabilities)
    if (record.target == target)
      return &record;
  return nullptr;
}

/// What `backend` runs on every one of its targets: the record that holds
/// for an artifact compiled for a target of another backend (a cpu-target
/// artifact on the cuda backend).
constexpr Capabilities commonCapabilities(std::string_view backend) {
  Capabilities common;
  common.backend = backend;
  bool first = true;
  for (const Capabilities &r : kCapabilities) {
    if (r.backend != backend)
      continue;
    if (first) {
      common = r;
      common.target = "";
      common.computeCapability = 0;
      first = false;
      continue;
    }
    common.fp8Recipes &= r.fp8Recipes;
    common.fp8Dispatch = common.fp8Dispatch && r.fp8Dispatch;
    if (r.fp8GemmAlignment > common.fp8GemmAlignment)
      common.fp8GemmAlignment = r.fp8GemmAlignment;
    common.pipelineStages = common.pipelineStages && r.pipelineStages;
    common.microbatches = common.microbatches && r.microbatches;
    common.expertChunks = common.expertChunks && r.expertChunks;
    common.asyncCollectives = common.asyncCollectives && r.asyncCollectives;
    common.dtypes &= r.dtypes;
    if (r.fp8Block != 0)
      common.fp8Block = r.fp8Block;
    common.linearCrossEntropy =
        common.linearCrossEntropy && r.linearCrossEntropy;
    common.gemmEpilogues = common.gemmEpilogues && r.gemmEpilogues;
    common.scoredRouters = common.scoredRouters && r.scoredRouters;
    common.routerLosses = common.routerLosses && r.routerLosses;
    common.latentAttention = common.latentAttention && r.latentAttention;
    common.stageSharedParameters =
        common.stageSharedParameters && r.stageSharedParameters;
    common.documentMasking = common.documentMasking && r.documentMasking;
    common.contextParallel = common.contextParallel && r.contextParallel;
    common.shardedOptimizer = common.shardedOptimizer && r.shardedOptimizer;
    common.scaledRope = common.scaledRope && r.scaledRope;
  }
  return common;
}

/// What `backend` runs of an artifact compiled for `target`: the target's
/// own record on its backend; on the CPU backend, which emulates every
/// target, the CPU's; on another backend, what it runs everywhere
/// (commonCapabilities, target left empty).
constexpr Capabilities backendCapabilities(std::string_view backend,
                                           std::string_view target) {
  const Capabilities *own = targetCapabilities(target);
  if (own && own->backend == backend)
    return *own;
  if (backend == "cpu")
    return *targetCapabilities("cpu");
  return commonCapabilities(backend);
}

/// "tensorwise, delayed", or "none".
inline std::string recipeList(const Capabilities &caps) {
  std::string list;
  for (Fp8Recipe recipe : kFp8Recipes)
    if (caps.hasRecipe(recipe)) {
      if (!list.empty())
        list += ", ";
      list += fp8RecipeName(recipe);
    }
  return list.empty() ? "none" : list;
}

/// The dtypes a record can list, with the names reports print.
inline constexpr std::pair<rt::DType, std::string_view> kDtypeNames[] = {
    {rt::DType::F32, "f32"}, {rt::DType::I32, "i32"}, {rt::DType::BF16, "bf16"}};

/// "f32, i32".
inline std::string dtypeList(const Capabilities &caps) {
  std::string list;
  for (auto [dtype, name] : kDtypeNames)
    if (caps.hasDtype(dtype))
      list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

/// The record as one line: "fp8_recipes: tensorwise, delayed; fp8_dispatch:
/// no; ...", for --report.
inline std::string describeCapabilities(const Capabilities &caps) {
  auto yesNo = [](bool b) { return b ? "yes" : "no"; };
  std::string line;
  auto add = [&](std::string_view name, const std::string &value) {
    if (!line.empty())
      line += "; ";
    line += std::string(name) + ": " + value;
  };
  add(kFp8RecipesName, recipeList(caps));
  add(kFp8DispatchName, yesNo(caps.fp8Dispatch));
  add(kFp8GemmAlignmentName, std::to_string(caps.fp8GemmAlignment));
  add(kPipelineStagesName, yesNo(caps.pipelineStages));
  add(kMicrobatchesName, yesNo(caps.microbatches));
  add(kExpertChunksName, yesNo(caps.expertChunks));
  add(kAsyncCollectivesName, yesNo(caps.asyncCollectives));
  add(kDtypesName, dtypeList(caps));
  add(kFp8BlockName,
      caps.fp8Block == 0 ? std::string("any") : std::to_string(caps.fp8Block));
  add(kLinearCrossEntropyName, yesNo(caps.linearCrossEntropy));
  add(kGemmEpiloguesName, yesNo(caps.gemmEpilogues));
  add(kScoredRoutersName, yesNo(caps.scoredRouters));
  add(kRouterLossesName, yesNo(caps.routerLosses));
  add(kLatentAttentionName, yesNo(caps.latentAttention));
  add(kStageSharedParametersName, yesNo(caps.stageSharedParameters));
  add(kDocumentMaskingName, yesNo(caps.documentMasking));
  add(kContextParallelName, yesNo(caps.contextParallel));
  add(kShardedOptimizerName, yesNo(caps.shardedOptimizer));
  add(kScaledRopeName, yesNo(caps.scaledRope));
  return line;
}

/// "cpu, a100, h100, h200".
inline std::string targetList() {
  std::string list;
  for (const Capabilities &record : kCapabilities)
    list += (list.empty() ? "" : ", ") + std::string(record.target);
  return list;
}

} // namespace moe::caps

#endif // MOE_RUNTIME_CAPABILITIES_H
