//===- moec.cpp - compile a moe model into a training-step artifact -------===//
//
//   moec model.mlir -o model.moebin [--report=memory] [--emit=mlir]
//
// Parses the flags into the options of the compile pipeline
// (moe/Target/CompilePipeline.h: mesh, microbatch split, the training-step
// passes or the ones given with --pass-pipeline, pipeline cut and schedule,
// reports, artifact), runs it with MLIR's usual instrumentation flags
// (--mlir-print-ir-after-all, --mlir-timing, ...) and writes what the
// pipeline does not: --emit=mlir and --emit-sbatch. --dump-pass-pipeline
// prints the pipeline instead; moe-opt --pass-pipeline runs it to the same
// artifact bytes.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Target/ChoosePlan.h"
#include "moe/Target/CompilePipeline.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Target/Passes.h"
#include "moe/Target/SbatchScript.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Passes.h"
#include "moe/Pipeline/Schedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class Emit { Artifact, MLIR };
enum class Report { Memory, Sharding, Pipeline, Cost };
} // namespace

static cl::OptionCategory moecCategory("moec options");

static cl::opt<std::string> inputFilename(cl::Positional,
                                          cl::desc("<model.mlir>"),
                                          cl::init("-"),
                                          cl::cat(moecCategory));
static cl::opt<std::string> outputFilename("o", cl::desc("output file"),
                                           cl::value_desc("file"),
                                           cl::init(""), cl::cat(moecCategory));
static cl::opt<Emit> emitKind(
    "emit", cl::desc("what to write"), cl::init(Emit::Artifact),
    cl::values(clEnumValN(Emit::Artifact, "artifact",
                          "the .moebin training-step artifact (default)"),
               clEnumValN(Emit::MLIR, "mlir", "the compiled IR")),
    cl::cat(moecCategory));
static cl::list<Report> reports(
    "report", cl::desc("print a report to stdout"), cl::CommaSeparated,
    cl::values(clEnumValN(Report::Memory, "memory",
                          "parameters, optimizer state and arena per rank"),
               clEnumValN(Report::Sharding, "sharding",
                          "how every parameter and tensor is split over "
                          "the mesh, and why"),
               clEnumValN(Report::Pipeline, "pipeline",
                          "the cost-balanced cut into --pp stages, with "
                          "per-stage compute and memory"),
               clEnumValN(Report::Cost, "cost",
                          "the predicted step time per rank on --cluster: "
                          "compute and communication per kind, MFU")),
    cl::cat(moecCategory));
static cl::opt<std::string> clusterFile(
    "cluster",
    cl::desc("the cluster the step runs on, as data (hardware/*.yaml): GPU "
             "peaks, memory and bandwidths, node topology"),
    cl::value_desc("cluster.yaml"), cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> meshSpec(
    "mesh",
    cl::desc("the device mesh, e.g. dp=2,tp=2 (axes dp, fsdp, ep, tp; ep "
             "folds onto the data-parallel ranks)"),
    cl::value_desc("axis=size,..."), cl::init(""), cl::cat(moecCategory));
static cl::opt<unsigned> pipelineStages(
    "pp", cl::desc("pipeline stages (the layer sequence is cut into them)"),
    cl::init(1), cl::cat(moecCategory));
static cl::opt<unsigned> virtualStages(
    "virtual-stages",
    cl::desc("model chunks per pipeline stage (interleaved schedules)"),
    cl::init(1), cl::cat(moecCategory));
static cl::opt<unsigned> microbatches(
    "microbatches",
    cl::desc("microbatches per step for the pipeline schedule (default: 2 "
             "per stage)"),
    cl::init(0), cl::cat(moecCategory));
static cl::opt<::moe::pipeline::ScheduleKind> scheduleKind(
    "pipeline-schedule", cl::desc("the pipeline schedule"),
    cl::init(::moe::pipeline::ScheduleKind::OneFOneB),
    cl::values(
        clEnumValN(::moe::pipeline::ScheduleKind::GPipe, "gpipe", "GPipe"),
        clEnumValN(::moe::pipeline::ScheduleKind::OneFOneB, "1f1b", "1F1B"),
        clEnumValN(::moe::pipeline::ScheduleKind::Interleaved1F1B,
                   "interleaved", "interleaved 1F1B (--virtual-stages)"),
        clEnumValN(::moe::pipeline::ScheduleKind::ZeroBubble, "zero-bubble",
                   "zero bubble (ZB-H1: weight gradients fill bubbles)")),
    cl::cat(moecCategory));
static cl::opt<std::string> pipelineTrace(
    "pipeline-trace",
    cl::desc("write the pipeline schedule as a Chrome trace (Perfetto)"),
    cl::value_desc("file.json"), cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> fp8Gemms(
    "fp8",
    cl::desc("GEMMs that read FP8 inputs (E4M3 values, E5M2 gradients, "
             "emulated bit-exactly on the CPU): experts"),
    cl::value_desc("gemms"), cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> fp8Scaling(
    "fp8-scaling",
    cl::desc("FP8 scales: blockwise (1 x block activations and gradients, "
             "block x block weights, all E4M3; default), tensorwise (per "
             "GEMM input from its amax, E5M2 gradients) or delayed (per GEMM "
             "input from its amax history, E5M2 gradients)"),
    cl::init("blockwise"), cl::cat(moecCategory));
static cl::opt<int64_t> fp8AmaxHistory(
    "fp8-amax-history",
    cl::desc("delayed FP8 scaling: the past steps whose largest amax sets a "
             "scale"),
    cl::init(16), cl::cat(moecCategory));
static cl::opt<std::string> target(
    "target",
    cl::desc("the hardware the step is compiled for: cpu (default; FP8 "
             "emulated), a100 (no FP8 GEMMs: FP8 only for the expert "
             "dispatch), h100, h200"),
    cl::init("cpu"), cl::cat(moecCategory));
static cl::opt<std::string> precision(
    "precision",
    cl::desc("the precision the step trains in: fp32, or bf16 (BF16 "
             "weights, activations and messages with fp32 master weights, "
             "docs/precision.md); default: the model's `precision`, else "
             "fp32 for --target=cpu and bf16 for GPU targets"),
    cl::value_desc("fp32|bf16"), cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> gradReduceDtype(
    "grad-reduce-dtype",
    cl::desc("with --precision=bf16, what weight gradients are reduced over "
             "ranks in: fp32 (default) or bf16 (half the bytes)"),
    cl::value_desc("fp32|bf16"), cl::init(""), cl::cat(moecCategory));
static cl::opt<int64_t> fp8Block("fp8-block",
                                 cl::desc("the block of blockwise FP8 scales"),
                                 cl::init(128), cl::cat(moecCategory));
static cl::opt<bool> fp8Dispatch(
    "fp8-dispatch",
    cl::desc("with expert parallelism, send tokens to the experts as FP8 "
             "codes (a quarter of the bytes); alone, the GEMMs stay in full "
             "precision"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<std::string> memoryBudget(
    "memory-budget",
    cl::desc("the memory one rank may hold (e.g. 80GiB, 512MiB, 4000000): "
             "activations are recomputed in the backward pass until the "
             "step fits"),
    cl::value_desc("size"), cl::init(""), cl::cat(moecCategory));
static cl::opt<bool> recomputeExperts(
    "recompute-experts",
    cl::desc("recompute the experts' w1 x and w3 x in the backward instead "
             "of keeping them from the forward (less memory, two more "
             "expert GEMMs; --memory-budget chooses per layer)"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<bool> fuseGemmEpilogues(
    "fuse-gemm-epilogues",
    cl::desc("fold residual adds and gradient sums into the GEMMs that make "
             "one of their terms, which add their product to it (where the "
             "target's backend runs it: the CPU; =false keeps the adds)"),
    cl::init(true), cl::cat(moecCategory));
static cl::opt<bool> countExpertLoads(
    "count-expert-loads",
    cl::desc("count each router's per-expert load, which moe-run reports per "
             "layer (load_min, load_max, load_cv; where the target's backend "
             "runs it: the CPU; =false leaves them out)"),
    cl::init(true), cl::cat(moecCategory));
static cl::opt<bool> fuseLmHeadLoss(
    "fuse-lm-head-loss",
    cl::desc("compute the LM head and its cross-entropy as one op that never "
             "holds the [tokens, vocab] logits (where the target's backend "
             "runs it: the CPU; =false keeps them apart)"),
    cl::init(true), cl::cat(moecCategory));
static cl::opt<int64_t> documentMask(
    "document-mask",
    cl::desc("mask attention at document boundaries, which the token id "
             "given (the tokenizer's end of document) ends in a flat token "
             "stream: moe.transformer document_mask = true and eos_token_id"),
    cl::value_desc("EOS_ID"), cl::init(-1));

static cl::opt<std::string> cpComm(
    "cp-comm",
    cl::desc("context parallelism's keys and values: ring (passed around "
             "the cp ranks behind attention), allgather (gathered before "
             "it), or auto (the compiler chooses; docs/sharding.md)"),
    cl::init("auto"), cl::cat(moecCategory));
static cl::opt<bool> zeroOne(
    "zero1",
    cl::desc("ZeRO-1: split each weight's optimizer state (and, in bf16, its "
             "fp32 master) over the data-parallel ranks that hold the weight, "
             "which stays whole: each rank updates its block and the blocks "
             "are gathered (the cpu backend runs it)"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<std::string> foldExperts(
    "fold-experts",
    cl::desc("split the experts over these token axes of the mesh too "
             "(dp, fsdp, cp, tp; e.g. cp): Megatron's MoE parallel folding, "
             "expert parallel ranks that are data, context or tensor "
             "parallel ranks (tp: expert-TP 1)"),
    cl::value_desc("axes"), cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> reduceBucket(
    "reduce-bucket",
    cl::desc("the most bytes of weight gradients reduced over a group in "
             "one message (e.g. 25MiB, the default; 0: one message per "
             "gradient)"),
    cl::value_desc("size"), cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> stepFunction(
    "step-function", cl::desc("the training-step function to write"),
    cl::init("train_step"), cl::cat(moecCategory));
static cl::opt<std::string> emitSbatch(
    "emit-sbatch",
    cl::desc("also write a Slurm batch script that runs the artifact on the "
             "compiled mesh (one task per rank)"),
    cl::value_desc("file.sbatch"), cl::init(""), cl::cat(moecCategory));
static cl::opt<int64_t> sbatchGpusPerNode(
    "gpus-per-node",
    cl::desc("--emit-sbatch: GPUs per node, one rank each (0: a CPU job)"),
    cl::init(0), cl::cat(moecCategory));
static cl::opt<int64_t> sbatchTasksPerNode(
    "tasks-per-node",
    cl::desc("--emit-sbatch, CPU job: ranks per node (0: all on one node)"),
    cl::init(0), cl::cat(moecCategory));
static cl::opt<std::string> sbatchPartition(
    "partition", cl::desc("--emit-sbatch: the Slurm partition"),
    cl::init(""), cl::cat(moecCategory));
static cl::opt<bool> planSearch(
    "plan",
    cl::desc("choose tp, pp, ep, dp/fsdp, microbatches, remat and FP8 for "
             "--gpus GPUs of --cluster and --global-batch, print the best "
             "plans, then compile the best"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<int64_t> planGpus("gpus", cl::desc("--plan: GPUs to use"),
                                 cl::init(0), cl::cat(moecCategory));
static cl::opt<int64_t> planGlobalBatch(
    "global-batch", cl::desc("--plan: sequences per step, all GPUs together"),
    cl::init(0), cl::cat(moecCategory));
static cl::opt<std::string> planFix(
    "plan-fix",
    cl::desc("--plan: choices to keep fixed, e.g. tp=8,pp=4,vpp=2,ep=8,mb=1,"
             "fsdp=1,remat=full,fp8=0,schedule=interleaved"),
    cl::init(""), cl::cat(moecCategory));
static cl::opt<std::string> planSoftware(
    "plan-software",
    cl::desc("--plan: how the runtime behaves (default moe-run's), e.g. "
             "attention=unfused,dp-overlap=0,tp-overlap=1,fp8=linears,"
             "weight-bytes=2,gradient-bytes=2,optimizer-bytes=12,"
             "activation-bytes=2"),
    cl::init(""), cl::cat(moecCategory));
static cl::opt<unsigned> planTop("plan-top",
                                 cl::desc("--plan: how many plans to print"),
                                 cl::init(5), cl::cat(moecCategory));
static cl::opt<bool> planKeepOverMemory(
    "plan-keep-over-memory",
    cl::desc("--plan: also rank plans that do not fit memory (to predict a "
             "published run; such plans are marked)"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<bool> planOnly(
    "plan-only", cl::desc("--plan: print the plans, compile nothing"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<bool> dumpPassPipeline(
    "dump-pass-pipeline",
    cl::desc("print the pass pipeline these flags run (for moe-opt "
             "--pass-pipeline, which writes the same artifact) and compile "
             "nothing"),
    cl::init(false), cl::cat(moecCategory));
static cl::opt<uint64_t> seed("seed",
                              cl::desc("parameter initialisation seed"),
                              cl::init(1234), cl::cat(moecCategory));


/// The output path: -o, else the input with a .moebin/.out.mlir extension.
static std::string outputPath() {
  if (!outputFilename.empty())
    return outputFilename;
  if (inputFilename == "-")
    return "-";
  StringRef stem = StringRef(inputFilename).rsplit('.').first;
  return (stem + (emitKind == Emit::MLIR ? ".out.mlir" : ".moebin")).str();
}

/// Whether an output (-o, --emit-sbatch, --pipeline-trace) would write over
/// an input (the model, --cluster): compared as the file system sees them,
/// so a link or another spelling of the same file counts.
static LogicalResult refuseOutputOverInput() {
  struct Named {
    const char *flag;
    std::string path;
  };
  const Named inputs[] = {{"the input", inputFilename},
                          {"--cluster", clusterFile}};
  const Named outputs[] = {{"-o", outputPath()},
                           {"--emit-sbatch", emitSbatch},
                           {"--pipeline-trace", pipelineTrace}};
  for (const Named &output : outputs)
    for (const Named &input : inputs) {
      bool same = false;
      if (output.path.empty() || output.path == "-" || input.path.empty() ||
          input.path == "-" ||
          llvm::sys::fs::equivalent(output.path, input.path, same) || !same)
        continue;
      llvm::errs() << "moec: error: " << output.flag << " '" << output.path
                   << "' is " << input.flag << " '" << input.path
                   << "': an output must not overwrite an input\n";
      return failure();
    }
  return success();
}

/// --emit-sbatch: the batch script running `artifact` on the compiled mesh.
static LogicalResult writeSbatch(ModuleOp module, StringRef artifact,
                                 unsigned pipelineStages, const char *argv0) {
  if (artifact == "-" || emitKind != Emit::Artifact) {
    llvm::errs() << "moec: error: --emit-sbatch needs an artifact written to "
                    "a file (-o model.moebin)\n";
    return failure();
  }
  if (sbatchGpusPerNode < 0 || sbatchTasksPerNode < 0) {
    llvm::errs() << "moec: error: --gpus-per-node and --tasks-per-node must "
                    "be >= 0\n";
    return failure();
  }
  mlir::moe::SbatchOptions options;
  mlir::moe::ModelStatistics stats = mlir::moe::computeModelStatistics(
      module, module.lookupSymbol<func::FuncOp>(stepFunction));
  options.modelName = stats.name.empty() ? "model" : stats.name;
  options.ranks = stats.ranks;
  // "pp=2 x dp=2 x tp=2", as the artifact's mesh reads.
  std::string description;
  if (pipelineStages > 1)
    description = "pp=" + std::to_string(pipelineStages);
  if (mlir::moe::MeshOp mesh = mlir::moe::getMesh(module))
    for (auto [axis, size] : llvm::zip(
             mesh.getAxes().getAsValueRange<StringAttr>(), mesh.getShape()))
      description += (description.empty() ? "" : " x ") + axis.str() + "=" +
                     std::to_string(size);
  options.meshDescription = description.empty() ? "1 rank" : description;
  options.gpusPerNode = sbatchGpusPerNode;
  options.tasksPerNode = sbatchTasksPerNode;
  options.partition = sbatchPartition;
  SmallString<256> absolute(artifact);
  llvm::sys::fs::make_absolute(absolute);
  options.artifactPath = std::string(absolute);
  // moe-run sits beside moec.
  std::string moec = llvm::sys::fs::getMainExecutable(
      argv0, reinterpret_cast<void *>(&writeSbatch));
  SmallString<256> moeRun(llvm::sys::path::parent_path(moec));
  llvm::sys::path::append(moeRun, "moe-run");
  options.moeRunPath = std::string(moeRun);
  std::string error;
  auto output = openOutputFile(emitSbatch, &error);
  if (!output) {
    llvm::errs() << "moec: error: " << error << "\n";
    return failure();
  }
  output->os() << mlir::moe::sbatchScript(options);
  output->keep();
  llvm::sys::fs::setPermissions(emitSbatch, llvm::sys::fs::all_read |
                                                llvm::sys::fs::owner_write |
                                                llvm::sys::fs::all_exe);
  return success();
}

/// The compile flags as given.
static mlir::moe::CompileFlags commandLineFlags(ModuleOp module) {
  mlir::moe::CompileFlags flags;
  flags.function = stepFunction;
  flags.mesh = meshSpec;
  flags.sharded = static_cast<bool>(mlir::moe::getMesh(module));
  flags.stages = pipelineStages;
  flags.virtualStages = virtualStages;
  flags.microbatches = microbatches;
  flags.schedule = scheduleKind;
  flags.pipelineTrace = pipelineTrace;
  flags.fp8Gemms = fp8Gemms;
  flags.fp8Scaling = fp8Scaling;
  flags.fp8Block = fp8Block;
  flags.fp8AmaxHistory = fp8AmaxHistory;
  flags.fp8Dispatch = fp8Dispatch;
  flags.target = target;
  flags.precision = precision;
  flags.gradReduceDtype = gradReduceDtype;
  flags.memoryBudget = memoryBudget;
  flags.recomputeExperts = recomputeExperts;
  flags.fuseLmHeadLoss = fuseLmHeadLoss;
  flags.countExpertLoads = countExpertLoads;
  flags.fuseGemmEpilogues = fuseGemmEpilogues;
  flags.reduceBucket = reduceBucket;
  flags.cpComm = cpComm;
  flags.foldExperts = foldExperts;
  flags.zeroOne = zeroOne;
  flags.reportSharding = llvm::is_contained(reports, Report::Sharding);
  flags.reportPipeline = llvm::is_contained(reports, Report::Pipeline);
  flags.reportMemory = llvm::is_contained(reports, Report::Memory);
  flags.reportCost = llvm::is_contained(reports, Report::Cost);
  flags.cluster = clusterFile;
  if (emitKind == Emit::Artifact)
    flags.artifact = outputPath();
  flags.seed = seed;
  return flags;
}

/// --plan: searches, prints the best plans (unless `quiet`) and sets the
/// flags that compile the best; `done` when only the plans were asked for.
static LogicalResult applyPlan(ModuleOp module, mlir::moe::CompileFlags &flags,
                               bool quiet, bool &done) {
  if (clusterFile.empty() || planGpus <= 0 || planGlobalBatch <= 0) {
    llvm::errs() << "moec: error: --plan needs --cluster FILE, --gpus N and "
                    "--global-batch B (positive)\n";
    return failure();
  }
  if (!meshSpec.empty() || pipelineStages > 1 || microbatches > 0) {
    llvm::errs() << "moec: error: --plan chooses the mesh, --pp and "
                    "--microbatches; fix choices with --plan-fix instead\n";
    return failure();
  }
  mlir::moe::PlanRequest request;
  request.cluster = clusterFile;
  request.gpus = planGpus;
  request.globalBatch = planGlobalBatch;
  request.fix = planFix;
  request.software = planSoftware;
  request.top = planTop;
  request.keepOverMemory = planKeepOverMemory;
  request.compile = !planOnly;
  // The plans are predicted in the precision the compile uses.
  request.precision = flags.precision;
  request.gradReduceDtype = flags.gradReduceDtype;
  FailureOr<mlir::moe::ChosenPlan> chosen = mlir::moe::choosePlan(
      module, request, quiet ? nullptr : &llvm::outs(),
      [](const Twine &message) {
        llvm::errs() << "moec: error: " << message << "\n";
      });
  if (failed(chosen))
    return failure();
  done = planOnly;
  if (done)
    return success();
  mlir::moe::applyPlan(*chosen, planGlobalBatch, flags);
  if (!quiet)
    mlir::moe::printChosenPlan(*chosen, flags, llvm::outs());
  return success();
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  mlir::moe::registerMoEPasses();
  mlir::moe::registerMoETargetPasses();
  mlir::moe::registerTrainingPipeline();
  mlir::moe::registerCompilePipeline();
  PassPipelineCLParser passPipeline("", "compiler passes to run (default: "
                                        "moe-training-pipeline)");
  // libLLVM registers hundreds of codegen options; --help shows moec's, and
  // --help-hidden everything, MLIR's --pass-pipeline and
  // --mlir-print-ir-after-all among them.
  cl::HideUnrelatedOptions(moecCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "moec: the MoE training compiler\n\n"
      "Compiles a moe model (models/*.mlir) into a training-step artifact for\n"
      "moe-run. MLIR's options also apply: --pass-pipeline=...,\n"
      "--mlir-print-ir-after-all, --mlir-timing (see --help-hidden).\n");

  DialectRegistry registry;
  registry.insert<mlir::moe::MoEDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Users read errors about their model, not the generic form of the op.
  context.printOpOnDiagnostic(false);

  if (failed(refuseOutputOverInput()))
    return 1;
  std::string error;
  auto input = openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << "moec: error: " << error << "\n";
    return 1;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;
  if (documentMask.getNumOccurrences()) {
    Builder builder(&context);
    bool found = false;
    for (auto transformer : module->getOps<mlir::moe::TransformerOp>()) {
      found = true;
      transformer.setDocumentMask(true);
      transformer.setEosTokenIdAttr(builder.getI64IntegerAttr(documentMask));
      if (failed(transformer.verify()))
        return 1;
    }
    if (!found) {
      llvm::errs() << "moec: error: --document-mask needs the model's "
                      "moe.transformer\n";
      return 1;
    }
  }

  mlir::moe::CompileFlags flags = commandLineFlags(*module);
  if (planSearch) {
    if (dumpPassPipeline && planOnly) {
      llvm::errs() << "moec: error: --dump-pass-pipeline: --plan-only "
                      "compiles nothing\n";
      return 1;
    }
    bool done = false;
    if (failed(applyPlan(*module, flags, dumpPassPipeline, done)))
      return 1;
    if (done)
      return 0;
  }
  bool steps = passPipeline.hasAnyOccurrences();
  flags.customSteps = steps;
  FailureOr<mlir::moe::CompileOptions> options =
      mlir::moe::resolveCompileFlags(flags, [](const Twine &message) {
        llvm::errs() << "moec: error: " << message << "\n";
      });
  if (failed(options))
    return 1;

  PassManager pm(&context, ModuleOp::getOperationName());
  auto addSteps = [&](OpPassManager &nested) {
    return passPipeline.addToPipeline(nested, [&](const Twine &message) {
      return emitError(UnknownLoc::get(&context)) << message;
    });
  };
  if (failed(mlir::moe::buildCompilePipeline(
          pm, *options,
          steps ? llvm::function_ref<LogicalResult(OpPassManager &)>(addSteps)
                : nullptr)))
    return 1;
  if (dumpPassPipeline) {
    pm.printAsTextualPipeline(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope timingScope = timing.getRootScope();
  pm.enableTiming(timingScope);
  if (failed(pm.run(*module)))
    return 1;

  std::string path = outputPath();
  if (emitKind == Emit::MLIR) {
    auto output = openOutputFile(path, &error);
    if (!output) {
      llvm::errs() << "moec: error: " << error << "\n";
      return 1;
    }
    module->print(output->os());
    output->keep();
  }
  if (!emitSbatch.empty() &&
      failed(writeSbatch(*module, path, options->stages, argv[0])))
    return 1;
  return 0;
}
