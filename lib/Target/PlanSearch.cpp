//===- PlanSearch.cpp - searching and printing parallelism plans ----------===//
//
// Enumerates the plans for a GPU count, drops those that do not divide or
// do not fit, ranks the rest with the closed-form pipeline bubble, then
// replays the schedules of the front runners (moe::pipeline::simulate) to
// rank them exactly. Plans are cheap to predict (no compilation), so the
// 1.1T model on 512 GPUs takes about a second.
//
//===----------------------------------------------------------------------===//
#include "moe/Target/Planner.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::moe;
namespace pp = ::moe::pipeline;

namespace {
std::vector<int64_t> divisorsOf(int64_t n, int64_t limit) {
  std::vector<int64_t> result;
  for (int64_t d = 1; d <= n && d <= limit; ++d)
    if (n % d == 0)
      result.push_back(d);
  return result;
}

template <typename T>
std::vector<T> choices(const std::optional<T> &fixed, std::vector<T> all) {
  if (fixed)
    return {*fixed};
  return all;
}

/// Where the experts go: ep ranks of etp each, folded or on the data ranks.
struct ExpertPlacement {
  int64_t ep = 1, etp = 0;
  bool folded = false;

  /// The data ranks its ep group spans (ParallelPlan::expertDataRanks).
  int64_t dataRanks(int64_t tp) const {
    ParallelPlan plan;
    plan.tp = tp;
    plan.ep = ep;
    plan.etp = etp;
    plan.expertsFolded = folded;
    return plan.expertDataRanks();
  }
};

/// The placements to search. moec's (a backend given): ep dividing dp and
/// the experts, split over tp. Another software's: Megatron-Core's MoE
/// parallel folding, any etp dividing tp and any ep with ep x etp dividing
/// the stage's tp x cp x dp ranks, on consecutive ranks.
std::vector<ExpertPlacement>
expertPlacements(const ModelShape &model, bool moe,
                 const PlanConstraints &constraints,
                 const ::moe::caps::Capabilities *backend, int64_t tp,
                 int64_t cp, int64_t dp) {
  std::vector<ExpertPlacement> placements;
  if (!moe) {
    placements.push_back({});
    return placements;
  }
  if (backend || constraints.moecPlacements) {
    // moec's: ep on the data ranks, the experts split over tp by width;
    // or folded over tp (--fold-experts=tp, etp 1): ep x tp ranks, tp's
    // consecutive.
    if (!constraints.etp || *constraints.etp == tp)
      for (int64_t ep : choices(constraints.ep, divisorsOf(dp, model.experts)))
        placements.push_back({ep, constraints.etp.value_or(0), false});
    if (tp > 1 && cp == 1 && (!constraints.etp || *constraints.etp == 1))
      for (int64_t epData : divisorsOf(dp, model.experts))
        if (model.experts % (epData * tp) == 0 &&
            (!constraints.ep || *constraints.ep == epData * tp))
          placements.push_back({epData * tp, 1, true});
    return placements;
  }
  for (int64_t etp : choices(constraints.etp, divisorsOf(tp, tp)))
    for (int64_t ep :
         choices(constraints.ep, divisorsOf(tp * cp * dp / etp, model.experts)))
      if (model.experts % ep == 0)
        placements.push_back({ep, etp, true});
  return placements;
}

/// FSDP or ZeRO-1 or neither: each where the ranks holding the same
/// weights are more than one; ZeRO-1 where the backend shards the optimizer
/// state (or for another software's run). `ep` is the data ranks the
/// experts' group spans.
std::vector<std::pair<bool, bool>>
shardings(const PlanConstraints &constraints,
          const ::moe::caps::Capabilities *backend, int64_t dp, int64_t ep) {
  std::vector<std::pair<bool, bool>> result;
  for (bool fsdp :
       choices(constraints.fsdp, dp > 1 && dp % ep == 0
                                     ? std::vector<bool>{false, true}
                                     : std::vector<bool>{false}))
    for (bool zero1 :
         choices(constraints.zero1,
                 !fsdp && (!backend || backend->shardedOptimizer) && dp > 1
                     ? std::vector<bool>{false, true}
                     : std::vector<bool>{false}))
      result.push_back({fsdp, zero1});
  return result;
}
} // namespace

PlanSearchResult mlir::moe::searchPlans(const ModelShape &model,
                                        const ClusterSpec &cluster,
                                        int64_t gpus, int64_t globalBatch,
                                        const PlanConstraints &constraints,
                                        const SoftwareTraits &requested,
                                        size_t keep) {
  PlanSearchResult result;
  std::vector<PlanCost> fitting;
  bool moe = model.moeLayers() > 0 && model.experts > 1;
  // For moec's own runtime: only what the backend runs, predicted without
  // the overlap it does not do. Choices it lacks are not searched; fixed
  // ones it lacks are counted and named.
  const ::moe::caps::Capabilities *backend = constraints.backend;
  result.backend = backend;
  SoftwareTraits software =
      backend ? limitToBackend(requested, *backend) : requested;
  result.software = software;
  bool searchPipelines = !backend || backend->pipelineStages;
  bool searchMicrobatches = !backend || backend->microbatches;
  // FP8 changes something for MoE models (the dispatch, and the experts'
  // GEMMs on FP8 GPUs) and, where the software casts them, for linears.
  bool fp8Gpu = cluster.gpu.fp8Tflops > 0 && (!backend || backend->fp8Gemms());
  bool fp8Wire = !backend || backend->fp8Dispatch;
  // Tensor parallelism stays inside a node: its collectives run twice per
  // layer per pass.
  for (int64_t tp : choices(constraints.tp,
                            divisorsOf(gpus, cluster.gpusPerNode)))
    for (int64_t stages :
         choices(constraints.pp, searchPipelines
                                     ? divisorsOf(gpus / tp, model.layers)
                                     : std::vector<int64_t>{1})) {
      if (gpus % (tp * stages))
        continue;
      // Context parallelism for sequences long enough to split in 2 cp
      // chunks of at least 1024 tokens (shorter ones lose more to the
      // key/value exchange than they save). Searched also where the
      // backend lacks it, so that the plans it leaves out are named.
      for (int64_t cp :
           choices(constraints.cp,
                   divisorsOf(gpus / (tp * stages),
                              std::max<int64_t>(1, model.seq / 2048)))) {
        if ((gpus / (tp * stages)) % cp)
          continue;
        int64_t dp = gpus / (tp * stages * cp);
        // Without a pipeline there is no schedule to choose (and checkPlan
        // drops fixed virtual stages).
        for (int64_t v : choices(constraints.virtualStages,
                                 stages > 1 ? std::vector<int64_t>{1, 2, 4}
                                            : std::vector<int64_t>{1}))
          for (pp::ScheduleKind schedule :
               stages == 1
                   ? std::vector<pp::ScheduleKind>{pp::ScheduleKind::OneFOneB}
               : v > 1 ? choices(constraints.schedule,
                                 {pp::ScheduleKind::Interleaved1F1B})
                       : choices(constraints.schedule,
                                 {pp::ScheduleKind::OneFOneB,
                                  pp::ScheduleKind::ZeroBubble}))
            for (ExpertPlacement placement :
                 expertPlacements(model, moe, constraints, backend, tp, cp, dp))
              // Without microbatches, one microbatch is the rank's batch
              // (a fixed pipeline is searched as usual, and refused below).
              for (int64_t mb :
                   choices(constraints.microbatchSize,
                           searchMicrobatches || stages > 1 || globalBatch % dp
                               ? std::vector<int64_t>{1, 2, 4, 8, 16}
                               : std::vector<int64_t>{globalBatch / dp}))
                for (auto [fsdp, zero1] : shardings(constraints, backend, dp,
                                                    placement.dataRanks(tp)))
                  for (Remat remat :
                       choices(constraints.remat,
                               {Remat::None, Remat::Selective, Remat::Full}))
                    for (bool fp8 :
                         choices(constraints.fp8,
                                 (moe &&
                                  ((placement.ep > 1 && fp8Wire) || fp8Gpu)) ||
                                         (fp8Gpu && software.fp8AllLinears)
                                     ? std::vector<bool>{false, true}
                                     : std::vector<bool>{false})) {
                      ParallelPlan plan;
                      plan.tp = tp;
                      plan.pp = stages;
                      plan.cp = cp;
                      plan.virtualStages = v;
                      plan.schedule = schedule;
                      plan.dp = dp;
                      plan.ep = placement.ep;
                      plan.etp = placement.etp;
                      plan.expertsFolded = placement.folded;
                      plan.microbatchSize = mb;
                      plan.fsdp = fsdp;
                      plan.zero1 = zero1;
                      plan.remat = remat;
                      plan.fp8 = fp8;
                      if (checkPlan(model, plan, globalBatch))
                        continue;
                      ++result.considered;
                      if (backend || constraints.moecPlacements) {
                        if (std::optional<std::string> reason =
                                backend
                                    ? checkRunnable(model, plan, globalBatch,
                                                    cluster.gpu, *backend)
                                    : checkCompilable(plan)) {
                          if (result.rejectedBackend++ == 0)
                            result.backendReason = *reason;
                          continue;
                        }
                      }
                      PlanCost cost =
                          evaluatePlan(model, plan, cluster, globalBatch,
                                       software, /*simulate=*/false);
                      if (!cost.fits) {
                        ++result.rejectedMemory;
                        if (!constraints.keepOverMemory)
                          continue;
                      }
                      fitting.push_back(std::move(cost));
                    }
      }
    }
  // Equally fast plans (within 0.1%): the one using less memory first.
  auto faster = [](const PlanCost &a, const PlanCost &b) {
    if (std::abs(a.stepSeconds - b.stepSeconds) >
        1e-3 * std::max(a.stepSeconds, b.stepSeconds))
      return a.stepSeconds < b.stepSeconds;
    return a.peakMemory < b.peakMemory;
  };
  std::sort(fitting.begin(), fitting.end(), faster);
  // Replay the schedules of the front runners; the closed form assumes
  // equal stages and free sends.
  size_t replay = std::min<size_t>(fitting.size(), std::max<size_t>(64, 4 * keep));
  for (size_t i = 0; i < replay; ++i)
    fitting[i] = evaluatePlan(model, fitting[i].plan, cluster, globalBatch,
                              software, /*simulate=*/true);
  fitting.resize(replay);
  std::sort(fitting.begin(), fitting.end(), faster);
  if (fitting.size() > keep)
    fitting.resize(keep);
  result.best = std::move(fitting);
  return result;
}

void mlir::moe::printPlans(const PlanSearchResult &result,
                           const ModelShape &model, const ClusterSpec &cluster,
                           int64_t gpus, int64_t globalBatch,
                           llvm::raw_ostream &os) {
  os << llvm::formatv("plans for {0} ({1:e3} parameters) on {2} x {3} of {4}, "
                      "global batch {5} x {6} tokens\n",
                      model.name, model.totalParams(), gpus, cluster.gpu.name,
                      cluster.name, globalBatch, model.seq);
  os << llvm::formatv("  {0} plans considered, {1} rejected for memory, {2} "
                      "shown\n",
                      result.considered, result.rejectedMemory,
                      result.best.size());
  os << "  precision " << describeBytes(result.software) << "\n";
  if (const ::moe::caps::Capabilities *backend = result.backend) {
    os << "  only plans the " << backend->backend << " backend on "
       << backend->target
       << " runs: " << ::moe::caps::describeCapabilities(*backend) << "\n";
    if (result.rejectedBackend > 0)
      os << "  " << result.rejectedBackend << " plans left out: "
         << result.backendReason << "\n";
  }
  for (auto [index, cost] : llvm::enumerate(result.best)) {
    os << llvm::formatv("#{0} {1}\n", index + 1, cost.plan.describe());
    os << llvm::format("     step %.4g s, %.1f tokens/s per GPU, MFU %.1f%%, "
                       "memory %.4g of %.0f GiB%s\n",
                       cost.stepSeconds, cost.tokensPerSecondPerGpu,
                       100 * cost.mfu, cost.peakMemory / 1073741824.0,
                       cluster.gpu.memoryGiB,
                       cost.fits ? "" : " (does not fit)");
    os << llvm::format("     compute %.4g s, bubble %.4g s, exposed comm "
                       "%.4g s, optimizer %.4g s; %lld microbatches\n",
                       cost.computeSeconds, cost.bubbleSeconds,
                       cost.exposedCommSeconds, cost.optimizerSeconds,
                       static_cast<long long>(cost.microbatches));
    os << "     comm:";
    if (cost.expertChunks > 1)
      os << " (expert exchange in " << cost.expertChunks << " chunks)";
    for (const auto &[kind, seconds] : cost.commSeconds)
      os << llvm::format(" %s %.4g s;", kind.c_str(), seconds);
    os << "\n";
    bool mixed = result.software.precision && result.software.precision->isMixed();
    os << llvm::format(mixed ? "     memory GiB: weights %.4g (bf16 working "
                               "copies), gradients %.4g, optimizer %.4g "
                               "(fp32 masters and moments), activations %.4g\n"
                             : "     memory GiB: weights %.4g, gradients %.4g, "
                               "optimizer %.4g, activations %.4g\n",
                       cost.weightMemory / 1073741824.0,
                       cost.gradientMemory / 1073741824.0,
                       cost.optimizerMemory / 1073741824.0,
                       cost.activationMemory / 1073741824.0);
  }
}
