//===- PlanCapabilities.cpp - plans the target's backend runs -------------===//
//
// `moec --plan` proposes what moe-run runs: a plan is checked against the
// capability record of the cluster GPU's target (moe/Runtime/Capabilities.h),
// and the cost model leaves out the overlap the backend does not do.
//
//===----------------------------------------------------------------------===//
#include "moe/Target/Planner.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;
namespace caps = ::moe::caps;

namespace {
std::string str(std::string_view view) { return std::string(view); }
} // namespace

std::optional<std::string>
mlir::moe::checkCompilable(const ParallelPlan &plan) {
  // ZeRO-1 or FSDP, the experts split over tp as attention is, and ep an
  // axis of the data ranks.
  if (plan.zero1 && plan.fsdp)
    return std::string("moec shards the optimizer state with the weights "
                       "(fsdp) or alone (zero1), not both");
  // Folded over tp with etp 1 is --fold-experts=tp.
  if ((plan.expertsFolded || (plan.etp > 0 && plan.etp != plan.tp)) &&
      !plan.foldedOverTp())
    return llvm::formatv("moec splits the experts over tp={0}, or folds them "
                         "over it with etp 1 (--fold-experts=tp, without cp, "
                         "ep a multiple of tp); etp={1} ep={2} is another "
                         "software's placement",
                         plan.tp, plan.expertTp(), plan.ep)
        .str();
  return std::nullopt;
}

std::optional<std::string>
mlir::moe::checkRunnable(const ModelShape &model, const ParallelPlan &plan,
                         int64_t globalBatch, const GpuSpec &gpu,
                         const caps::Capabilities &backend) {
  auto lacks = [&](std::string_view capability, const std::string &needs) {
    return llvm::formatv("the {0} backend on {1} lacks {2} ({3})",
                         str(backend.backend), str(backend.target),
                         str(capability), needs)
        .str();
  };
  if (std::optional<std::string> reason = checkCompilable(plan))
    return reason;
  if (plan.pp * plan.virtualStages > 1 && !backend.pipelineStages)
    return lacks(caps::kPipelineStagesName,
                 llvm::formatv("pp={0} vpp={1}", plan.pp, plan.virtualStages));
  if (plan.cp > 1 && !backend.contextParallel)
    return lacks(caps::kContextParallelName, llvm::formatv("cp={0}", plan.cp));
  if (plan.zero1 && !backend.shardedOptimizer)
    return lacks(caps::kShardedOptimizerName, "zero1");
  int64_t microbatches = globalBatch / (plan.dp * plan.microbatchSize);
  if (microbatches > 1 && !backend.microbatches)
    return lacks(caps::kMicrobatchesName,
                 llvm::formatv("{0} microbatches of {1}", microbatches,
                               plan.microbatchSize));
  if (!plan.fp8)
    return std::nullopt;
  bool gemms = gpu.fp8Tflops > 0 && backend.fp8Gemms();
  bool dispatch = plan.ep > 1 && backend.fp8Dispatch;
  if (!gemms && !dispatch)
    return lacks(llvm::formatv("{0} and {1}", str(caps::kFp8RecipesName),
                               str(caps::kFp8DispatchName))
                     .str(),
                 "fp8");
  int64_t align = backend.fp8GemmAlignment;
  if (gemms && (model.hidden % align || (model.ffn / plan.tp) % align))
    return lacks(caps::kFp8GemmAlignmentName,
                 llvm::formatv("fp8 GEMMs of hidden {0} and ffn {1} per rank, "
                               "not multiples of {2}",
                               model.hidden, model.ffn / plan.tp, align));
  return std::nullopt;
}

SoftwareTraits mlir::moe::limitToBackend(SoftwareTraits software,
                                         const caps::Capabilities &backend) {
  software.chunkedExpertExchange =
      software.chunkedExpertExchange && backend.expertChunks;
  software.overlapDataParallel =
      software.overlapDataParallel && backend.asyncCollectives;
  software.fp8Dispatch = software.fp8Dispatch && backend.fp8Dispatch;
  return software;
}

std::optional<std::string>
mlir::moe::checkPrecisionRunnable(const PrecisionRecipe &recipe,
                                  const caps::Capabilities &backend) {
  if (!recipe.isMixed() || backend.hasDtype(::moe::rt::DType::BF16))
    return std::nullopt;
  return llvm::formatv("the {0} backend on {1} lacks {2} (bf16, for "
                       "--precision={3})",
                       str(backend.backend), str(backend.target),
                       str(caps::kDtypesName), precisionName(recipe.compute))
      .str();
}

std::string mlir::moe::fp8RecipeOf(const caps::Capabilities &backend) {
  // Blockwise first where every GEMM of it runs in FP8; on hardware block
  // scaling its weight gradients run in BF16, and tensorwise is faster.
  bool blockwiseFirst = backend.blockwiseBackwardFp8Share() == 1.0;
  for (caps::Fp8Recipe recipe :
       {blockwiseFirst ? caps::Fp8Recipe::Blockwise : caps::Fp8Recipe::None,
        caps::Fp8Recipe::Tensorwise, caps::Fp8Recipe::Delayed,
        caps::Fp8Recipe::Blockwise})
    if (recipe != caps::Fp8Recipe::None && backend.hasRecipe(recipe))
      return str(caps::fp8RecipeName(recipe));
  return "";
}
