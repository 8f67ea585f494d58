//===- CompileFlags.cpp - moec's flags as compile pipeline options --------===//
//
// One reading of moec's flags, shared by moec and the registered
// `moe-compile` pipeline: their defaults (microbatches, the interleaved
// schedule), the checks that name the flag, and which passes they add.
//
//===----------------------------------------------------------------------===//
#include "moe/Target/CompilePipeline.h"
#include "moe/Target/Hardware.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/PrecisionRecipe.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Target.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace mlir::moe;
namespace pp = ::moe::pipeline;

unsigned CompileFlags::numMicrobatches() const {
  if (microbatches)
    return microbatches;
  return stages * virtualStages > 1 ? 2 * stages : 1;
}

bool CompileFlags::isPipelined() const {
  return stages * virtualStages > 1 || numMicrobatches() > 1;
}

std::optional<uint64_t> mlir::moe::parseBytes(StringRef text) {
  StringRef number = text.take_while(
      [](char c) { return llvm::isDigit(c) || c == '.'; });
  StringRef unit = text.drop_front(number.size()).trim();
  double value;
  if (number.empty() || number.getAsDouble(value))
    return std::nullopt;
  double scale = llvm::StringSwitch<double>(unit.lower())
                     .Cases("", "b", 1)
                     .Case("kib", 1024.0)
                     .Case("mib", 1048576.0)
                     .Case("gib", 1073741824.0)
                     .Case("tib", 1099511627776.0)
                     .Case("kb", 1e3)
                     .Case("mb", 1e6)
                     .Case("gb", 1e9)
                     .Case("tb", 1e12)
                     .Default(0);
  if (scale == 0 || value * scale >= 1.8e19)
    return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

FailureOr<CompileOptions>
mlir::moe::resolveCompileFlags(const CompileFlags &flags,
                               function_ref<void(const Twine &)> error) {
  auto fail = [&](const Twine &message) {
    error(message);
    return failure();
  };
  CompileOptions options;
  options.function = flags.function;
  if (!flags.mesh.empty()) {
    std::string message;
    if (failed(parseMeshSpec(flags.mesh, message)))
      return fail("--mesh: " + message);
    options.mesh = flags.mesh;
  }
  options.sharded = !options.mesh.empty() || flags.sharded;
  options.batch = flags.batch;
  options.microbatches = flags.numMicrobatches();

  // --pass-pipeline's passes stand in for the training-step ones, so the
  // flags that configure those would do nothing: refused, not ignored.
  if (flags.customSteps) {
    SmallVector<StringRef> ignored;
    if (!flags.fp8Gemms.empty())
      ignored.push_back("--fp8");
    if (flags.fp8Dispatch)
      ignored.push_back("--fp8-dispatch");
    if (!flags.precision.empty())
      ignored.push_back("--precision");
    if (!flags.gradReduceDtype.empty())
      ignored.push_back("--grad-reduce-dtype");
    if (!flags.memoryBudget.empty())
      ignored.push_back("--memory-budget");
    if (flags.recomputeExperts)
      ignored.push_back("--recompute-experts");
    if (!flags.fuseLmHeadLoss)
      ignored.push_back("--fuse-lm-head-loss=false");
    if (!flags.fuseGemmEpilogues)
      ignored.push_back("--fuse-gemm-epilogues=false");
    if (!flags.countExpertLoads)
      ignored.push_back("--count-expert-loads=false");
    if (!flags.reduceBucket.empty())
      ignored.push_back("--reduce-bucket");
    if (flags.cpComm != "auto")
      ignored.push_back("--cp-comm");
    if (!flags.foldExperts.empty())
      ignored.push_back("--fold-experts");
    if (flags.zeroOne)
      ignored.push_back("--zero1");
    if (!ignored.empty())
      return fail(llvm::join(ignored, ", ") +
                  " configure moec's training-step passes, which "
                  "--pass-pipeline replaces: give those passes' options in "
                  "the pipeline instead (moe-fp8, moe-mixed-precision, "
                  "moe-rematerialize, moe-save-expert-activations, "
                  "moe-bucket-reductions, moe-ring-attention, "
                  "moe-fuse-linear-cross-entropy, "
                  "moe-fuse-gemm-epilogues, moe-count-expert-loads)");
  }

  if (!flags.customSteps) {
    if (!lookupTarget(flags.target))
      return fail("unknown target '" + flags.target + "': expected " +
                  knownTargetList());
    if (!flags.fp8Gemms.empty() || flags.fp8Dispatch) {
      Fp8Options &fp8 = options.fp8.emplace();
      fp8.gemms = flags.fp8Gemms.empty() ? std::string("none") : flags.fp8Gemms;
      fp8.scaling = flags.fp8Scaling;
      fp8.block = flags.fp8Block;
      fp8.dispatch = flags.fp8Dispatch;
      fp8.amaxHistory = flags.fp8AmaxHistory;
      fp8.target = flags.target;
    }
    // The names are checked here, the combination with the module's
    // request by moe-mixed-precision.
    for (auto [flag, value] :
         {std::pair<StringRef, StringRef>("--precision", flags.precision),
          {"--grad-reduce-dtype", flags.gradReduceDtype}})
      if (!value.empty() && !parsePrecision(value))
        return fail(flag + ": unknown precision '" + value + "' (known: " +
                    knownPrecisions() + ")");
    options.precision = flags.precision;
    options.gradReduceDtype = flags.gradReduceDtype;
  }

  options.reportSharding = flags.reportSharding;
  options.reportPipeline = flags.reportPipeline;
  options.reportMemory = flags.reportMemory;
  options.reportCost = flags.reportCost;
  // The pipeline report cuts an unpipelined step too (into one stage).
  options.planPipeline = flags.reportPipeline || flags.isPipelined();
  if (options.planPipeline) {
    options.stages = flags.stages;
    options.virtualStages = flags.virtualStages;
    options.schedule = flags.schedule;
    if (flags.virtualStages > 1 &&
        options.schedule == pp::ScheduleKind::OneFOneB)
      options.schedule = pp::ScheduleKind::Interleaved1F1B;
    pp::ScheduleOptions schedule;
    schedule.stages = options.stages;
    schedule.virtualStages = options.virtualStages;
    schedule.microbatches = options.microbatches;
    pp::ErrorOr<pp::Schedule> built =
        pp::buildSchedule(options.schedule, schedule);
    if (!built)
      return fail("pipeline schedule: " + built.getError());
    options.pipelineTrace = flags.pipelineTrace;
  }

  // A size flag as written ("80GiB"), or the error naming it.
  auto sizeOf = [&](StringRef flag, StringRef text,
                    StringRef examples) -> FailureOr<uint64_t> {
    if (std::optional<uint64_t> bytes = parseBytes(text))
      return *bytes;
    fail("--" + flag + ": expected a size like " + examples + ", found '" +
         text + "'");
    return failure();
  };
  if (!flags.memoryBudget.empty()) {
    FailureOr<uint64_t> bytes =
        sizeOf("memory-budget", flags.memoryBudget, "80GiB, 512MiB or 4000000");
    if (failed(bytes))
      return failure();
    options.memoryBudget = *bytes;
  }
  options.saveExpertActivations = !flags.recomputeExperts;
  options.fuseLinearCrossEntropy = flags.fuseLmHeadLoss;
  options.fuseGemmEpilogues = flags.fuseGemmEpilogues;
  options.countExpertLoads = flags.countExpertLoads;
  if (!flags.reduceBucket.empty()) {
    FailureOr<uint64_t> bytes = sizeOf("reduce-bucket", flags.reduceBucket,
                                       "25MiB, 4096 or 0 (no buckets)");
    if (failed(bytes))
      return failure();
    options.reduceBucketBytes = *bytes;
  }
  if (flags.cpComm != "auto" && flags.cpComm != "ring" &&
      flags.cpComm != "allgather")
    return fail("--cp-comm: unknown '" + flags.cpComm +
                "': expected ring, allgather or auto");
  options.cpComm = flags.cpComm;
  if (!flags.foldExperts.empty()) {
    if (!options.sharded)
      return fail("--fold-experts needs --mesh: it folds the experts over "
                  "mesh axes");
    for (StringRef axis : llvm::split(flags.foldExperts, ','))
      options.foldExperts.push_back(axis.trim().str());
  }
  if (flags.zeroOne && !options.sharded)
    return fail("--zero1 needs --mesh: it splits the optimizer state over "
                "the mesh's data-parallel ranks");
  options.zeroOne = flags.zeroOne;
  if (options.reportCost) {
    if (flags.cluster.empty())
      return fail("--report=cost needs --cluster FILE");
    llvm::Expected<ClusterSpec> cluster = loadCluster(flags.cluster);
    if (!cluster)
      return fail(llvm::toString(cluster.takeError()));
    options.cluster = flags.cluster;
  }
  options.artifact = flags.artifact;
  options.seed = flags.seed;
  options.target = flags.target;
  return options;
}

using llvm::cl::desc;
using llvm::cl::init;

namespace {
/// moe-compile's options: moec's flags, spelled the same.
struct CompilePipelineOptions
    : public PassPipelineOptions<CompilePipelineOptions> {
  template <typename T>
  using Opt = PassOptions::Option<T>;

  Opt<std::string> function{*this, "function", desc("the training step"),
                            init("train_step")};
  Opt<std::string> mesh{*this, "mesh", desc("the mesh, e.g. dp=2,tp=2")};
  Opt<bool> sharded{*this, "sharded",
                    desc("the module declares its own mesh"), init(false)};
  Opt<uint64_t> batch{*this, "batch",
                      desc("the global batch (0: the model's)"), init(0)};
  Opt<unsigned> pp{*this, "pp", desc("pipeline stages"), init(1)};
  Opt<unsigned> virtualStages{*this, "virtual-stages",
                              desc("model chunks per pipeline stage"), init(1)};
  Opt<unsigned> microbatches{
      *this, "microbatches",
      desc("microbatches per step (0: 2 per stage when pipelined)"), init(0)};
  Opt<std::string> schedule{
      *this, "pipeline-schedule",
      desc("gpipe, 1f1b, interleaved or zero-bubble"), init("1f1b")};
  Opt<std::string> pipelineTrace{*this, "pipeline-trace",
                                 desc("the schedule's Chrome trace file")};
  Opt<std::string> fp8{*this, "fp8", desc("GEMMs that read FP8: experts")};
  Opt<std::string> fp8Scaling{*this, "fp8-scaling",
                              desc("blockwise, tensorwise or delayed"),
                              init("blockwise")};
  Opt<int64_t> fp8Block{*this, "fp8-block", desc("blockwise FP8's block"),
                        init(128)};
  Opt<int64_t> fp8AmaxHistory{*this, "fp8-amax-history",
                              desc("delayed FP8's amax history"), init(16)};
  Opt<bool> fp8Dispatch{*this, "fp8-dispatch",
                        desc("send tokens to the experts as FP8"),
                        init(false)};
  Opt<std::string> target{*this, "target",
                          desc("cpu, a100, h100 or h200"), init("cpu")};
  Opt<std::string> precision{
      *this, "precision",
      desc("fp32 or bf16 (empty: the model's, else the target's)")};
  Opt<std::string> gradReduceDtype{
      *this, "grad-reduce-dtype",
      desc("what weight gradients are reduced in: fp32 or bf16")};
  Opt<std::string> memoryBudget{*this, "memory-budget",
                                desc("the memory one rank may hold")};
  Opt<bool> recomputeExperts{
      *this, "recompute-experts",
      desc("recompute the experts' up projections in the backward"),
      init(false)};
  Opt<bool> fuseGemmEpilogues{
      *this, "fuse-gemm-epilogues",
      desc("fold adds into the GEMMs that feed them where the target runs it"),
      init(true)};
  Opt<bool> countExpertLoads{
      *this, "count-expert-loads",
      desc("count each router's per-expert load for the metrics where the "
           "target runs it"),
      init(true)};
  Opt<bool> fuseLmHeadLoss{
      *this, "fuse-lm-head-loss",
      desc("fuse the LM head with its cross-entropy where the target runs it"),
      init(true)};
  Opt<std::string> reduceBucket{
      *this, "reduce-bucket",
      desc("the most bytes of gradients reduced in one message (0: none)")};
  Opt<std::string> cpComm{
      *this, "cp-comm",
      desc("context parallelism's keys: ring, allgather or auto"),
      init("auto")};
  Opt<std::string> foldExperts{
      *this, "fold-experts",
      desc("token axes the experts are split over too (e.g. cp)")};
  Opt<bool> zeroOne{*this, "zero1",
                    desc("ZeRO-1: the optimizer state split over the data "
                         "ranks"),
                    init(false)};
  PassOptions::ListOption<std::string> report{
      *this, "report", desc("sharding, pipeline, memory, cost")};
  Opt<std::string> cluster{*this, "cluster", desc("the cluster file")};
  Opt<std::string> output{*this, "output",
                          desc("the artifact (empty: none)")};
  Opt<uint64_t> seed{*this, "seed", desc("parameter initialisation seed"),
                     init(1234)};
};
} // namespace

/// `flags` from moe-compile's options; an error names the bad one.
static LogicalResult
readPipelineOptions(const CompilePipelineOptions &options, CompileFlags &flags,
                    function_ref<void(const Twine &)> error) {
  flags.function = options.function;
  flags.mesh = options.mesh;
  flags.sharded = options.sharded;
  flags.batch = options.batch;
  flags.stages = options.pp;
  flags.virtualStages = options.virtualStages;
  flags.microbatches = options.microbatches;
  std::optional<pp::ScheduleKind> kind =
      options.schedule == "interleaved"
          ? pp::ScheduleKind::Interleaved1F1B
          : parseScheduleKind(options.schedule);
  if (!kind) {
    error("unknown pipeline-schedule '" + options.schedule +
          "': expected gpipe, 1f1b, interleaved or zero-bubble");
    return failure();
  }
  flags.schedule = *kind;
  flags.pipelineTrace = options.pipelineTrace;
  flags.fp8Gemms = options.fp8;
  flags.fp8Scaling = options.fp8Scaling;
  flags.fp8Block = options.fp8Block;
  flags.fp8AmaxHistory = options.fp8AmaxHistory;
  flags.fp8Dispatch = options.fp8Dispatch;
  flags.target = options.target;
  flags.precision = options.precision;
  flags.gradReduceDtype = options.gradReduceDtype;
  flags.memoryBudget = options.memoryBudget;
  flags.recomputeExperts = options.recomputeExperts;
  flags.fuseLmHeadLoss = options.fuseLmHeadLoss;
  flags.fuseGemmEpilogues = options.fuseGemmEpilogues;
  flags.countExpertLoads = options.countExpertLoads;
  flags.reduceBucket = options.reduceBucket;
  flags.cpComm = options.cpComm;
  flags.foldExperts = options.foldExperts;
  flags.zeroOne = options.zeroOne;
  for (const std::string &report : options.report) {
    bool *wanted = llvm::StringSwitch<bool *>(report)
                       .Case("sharding", &flags.reportSharding)
                       .Case("pipeline", &flags.reportPipeline)
                       .Case("memory", &flags.reportMemory)
                       .Case("cost", &flags.reportCost)
                       .Default(nullptr);
    if (!wanted) {
      error("unknown report '" + report +
            "': expected sharding, pipeline, memory or cost");
      return failure();
    }
    *wanted = true;
  }
  flags.cluster = options.cluster;
  flags.artifact = options.output;
  flags.seed = options.seed;
  return success();
}

void mlir::moe::registerCompilePipeline() {
  registerPassPipeline(
      "moe-compile",
      "moec's whole compile, one option per flag: mesh, microbatches, "
      "pipeline, FP8, memory budget, reports and the artifact (output)",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        CompilePipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        bool failedFlag = false;
        auto error = [&](const Twine &message) {
          failedFlag = true;
          (void)errorHandler("moe-compile: " + message);
        };
        CompileFlags flags;
        if (failed(readPipelineOptions(options, flags, error)))
          return failure();
        FailureOr<CompileOptions> resolved = resolveCompileFlags(flags, error);
        if (failed(resolved) || failedFlag)
          return failure();
        return buildCompilePipeline(pm, *resolved);
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> handler) {
        handler(CompilePipelineOptions());
      });
}
