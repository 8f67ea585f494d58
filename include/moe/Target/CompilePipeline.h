//===- CompilePipeline.h - moec's whole compilation as one pipeline -*- C++ -*-===//
//
// Everything moec does between parsing the model and exiting is one pass
// pipeline: the mesh, the microbatch split, the training-step passes, the
// pipeline cut and schedule, the reports and the artifact. moec builds it
// from its flags (and prints it with --dump-pass-pipeline); moe-opt
// --pass-pipeline runs the printed text to the same artifact bytes.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_COMPILEPIPELINE_H
#define MOE_TARGET_COMPILEPIPELINE_H

#include "moe/Pipeline/Schedule.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>
#include <string>

namespace mlir::moe {

/// What the compile pipeline does; each field is the option of one pass.
struct CompileOptions {
  /// The training step the pipeline builds, reports on and writes.
  std::string function = "train_step";
  /// moe-set-mesh's mesh ("dp=2,tp=2"); empty: the module's own, if any.
  std::string mesh;
  /// Whether the step is sharded over a mesh (from `mesh` or the module):
  /// adds sharding propagation and partitioning.
  bool sharded = false;
  /// moe-split-batch: the batch before the split (0: the model's) and the
  /// microbatches per step.
  uint64_t batch = 0;
  unsigned microbatches = 1;
  /// moe-plan-pipeline, when `planPipeline`: the cut into stages x virtual
  /// stages, the schedule over the microbatches, and moe-split-pipeline-
  /// stages after partitioning.
  bool planPipeline = false;
  unsigned stages = 1, virtualStages = 1;
  ::moe::pipeline::ScheduleKind schedule = ::moe::pipeline::ScheduleKind::OneFOneB;
  std::string pipelineTrace;
  /// moe-mixed-precision's request (moe/Transforms/PrecisionRecipe.h):
  /// --precision and --grad-reduce-dtype as given (empty: not given; the
  /// pass then takes moe.transformer's `precision`, else the target's
  /// default).
  std::string precision, gradReduceDtype;
  /// moe-fp8 before autodiff.
  std::optional<Fp8Options> fp8;
  /// moe-fuse-linear-cross-entropy after the expansion, where the target's
  /// backend runs the fused op (off: --fuse-lm-head-loss=false).
  bool fuseLinearCrossEntropy = true;
  /// moe-fuse-gemm-epilogues after partitioning, where the target's backend
  /// runs the accumulating GEMMs (off: --fuse-gemm-epilogues=false).
  bool fuseGemmEpilogues = true;
  /// moe-count-expert-loads after the expansion, where the target's backend
  /// runs the counters (off: --count-expert-loads=false).
  bool countExpertLoads = true;
  /// moe-rematerialize's budget in bytes.
  std::optional<uint64_t> memoryBudget;
  /// moe-save-expert-activations: keep the experts' up projections for the
  /// backward (off: --recompute-experts).
  bool saveExpertActivations = true;
  /// moe-bucket-reductions' bucket size in bytes (0: no buckets).
  uint64_t reduceBucketBytes = 25 << 20;
  /// moe-ring-attention's choice for context parallelism's keys: "ring",
  /// "allgather" or "auto".
  std::string cpComm = "auto";
  /// moe-propagate-sharding's token axes the experts fold over.
  std::vector<std::string> foldExperts;
  /// moe-propagate-sharding's ZeRO-1.
  bool zeroOne = false;
  /// Reports (moe-print-report, and moe-plan-pipeline's), in pipeline
  /// order: sharding (and collectives), pipeline, memory, cost (needs
  /// `cluster`).
  bool reportSharding = false, reportPipeline = false, reportMemory = false,
       reportCost = false;
  std::string cluster;
  /// moe-write-artifact's file (empty: none written), its seed and the
  /// moec --target it records, whose backend's capabilities moe-run checks.
  std::string artifact;
  uint64_t seed = 1234;
  std::string target = "cpu";
};

/// moec's compile flags, as given (or as --plan chose them); also the
/// options of the registered `moe-compile` pipeline.
struct CompileFlags {
  std::string function = "train_step";
  /// --mesh; `sharded`: the module declares a mesh of its own.
  std::string mesh;
  bool sharded = false;
  /// --plan's global batch (0: the model's).
  uint64_t batch = 0;
  /// --pp, --virtual-stages, --microbatches (0: 2 per stage when
  /// pipelined, else 1), --pipeline-schedule (1F1B becomes interleaved
  /// with virtual stages), --pipeline-trace.
  unsigned stages = 1, virtualStages = 1, microbatches = 0;
  ::moe::pipeline::ScheduleKind schedule = ::moe::pipeline::ScheduleKind::OneFOneB;
  std::string pipelineTrace;
  /// --fp8, --fp8-scaling, --fp8-block, --fp8-amax-history,
  /// --fp8-dispatch, --target.
  std::string fp8Gemms, fp8Scaling = "blockwise";
  int64_t fp8Block = 128, fp8AmaxHistory = 16;
  bool fp8Dispatch = false;
  std::string target = "cpu";
  /// --precision=fp32|bf16 and --grad-reduce-dtype=fp32|bf16 (empty: not
  /// given).
  std::string precision, gradReduceDtype;
  /// --memory-budget, as written ("80GiB").
  std::string memoryBudget;
  /// --recompute-experts.
  bool recomputeExperts = false;
  /// --fuse-lm-head-loss, --fuse-gemm-epilogues, --count-expert-loads.
  bool fuseLmHeadLoss = true, fuseGemmEpilogues = true, countExpertLoads = true;
  /// --reduce-bucket, as written ("25MiB", "0"; empty: not given).
  std::string reduceBucket;
  /// --cp-comm: ring, allgather or auto.
  std::string cpComm = "auto";
  /// --fold-experts=cp,dp: token axes the experts are split over too.
  std::string foldExperts;
  /// --zero1: the optimizer state split over the data ranks.
  bool zeroOne = false;
  /// --report=sharding,pipeline,memory,cost and --cluster.
  bool reportSharding = false, reportPipeline = false, reportMemory = false,
       reportCost = false;
  std::string cluster;
  /// -o (empty: no artifact) and --seed.
  std::string artifact;
  uint64_t seed = 1234;
  /// --pass-pipeline stands in for the training-step passes: the target
  /// and FP8 flags are not theirs.
  bool customSteps = false;

  /// Microbatches per step: `microbatches`, else 2 per stage when
  /// pipelined.
  unsigned numMicrobatches() const;
  /// Whether the step is split into microbatches or stages at all.
  bool isPipelined() const;
};

/// The compile pipeline's options for `flags`; a bad flag is reported
/// through `error` (a message for "moec: error: ...", e.g. "--mesh: axis
/// 'dp' is given twice") and fails.
FailureOr<CompileOptions>
resolveCompileFlags(const CompileFlags &flags,
                    llvm::function_ref<void(const llvm::Twine &)> error);

/// Bytes from "80GiB", "512MiB", "1.5GB", "4000000" (powers of 1024 for
/// KiB/MiB/GiB/TiB, of 1000 for KB/MB/GB/TB); none for anything else.
std::optional<uint64_t> parseBytes(llvm::StringRef text);

/// Registers `moe-compile{...}`: the pipeline of moec's flags, one option
/// per flag (mesh, pp, microbatches, schedule, fp8, report, output, ...).
void registerCompilePipeline();

/// Adds the compile pipeline for `options` to `pm`. With `steps`, they
/// stand in for the training-step passes (moe-expand-transformer to
/// moe-plan-memory) and a failure from it is returned.
LogicalResult buildCompilePipeline(
    OpPassManager &pm, const CompileOptions &options,
    llvm::function_ref<LogicalResult(OpPassManager &)> steps = nullptr);

} // namespace mlir::moe

#endif // MOE_TARGET_COMPILEPIPELINE_H
