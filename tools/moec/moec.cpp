//===- moec.cpp - compile a moe model into a training-step artifact -------===//
//
//   moec model.mlir -o model.moebin [--report=memory] [--emit=mlir]
//
// Runs the default pipeline (expand, autodiff, optimizer, memory plan) or the
// one given with --pass-pipeline, with MLIR's usual instrumentation flags
// (--mlir-print-ir-after-all, --mlir-timing, ...), then writes the artifact.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Target/ArtifactWriter.h"
#include "moe/Target/CostModel.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Target/Planner.h"
#include "moe/Target/SbatchScript.h"
#include "moe/Target/ShardingReport.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Target.h"
#include "moe/Pipeline/Schedule.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Format.h"
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

/// Microbatches per step: --microbatches, else 2 per stage when pipelined.
static unsigned numMicrobatches() {
  if (microbatches)
    return microbatches;
  return pipelineStages * virtualStages > 1 ? 2 * pipelineStages : 1;
}

/// Whether the step is split into microbatches or stages at all.
static bool isPipelined() {
  return pipelineStages * virtualStages > 1 || numMicrobatches() > 1;
}

/// The schedule the artifact follows. Stages are taken as equal in cost
/// (the cut balances them); backward is twice forward, split evenly between
/// input and weight gradients.
static ::moe::pipeline::ErrorOr<::moe::pipeline::Schedule>
buildPipelineSchedule(::moe::pipeline::ScheduleOptions &options) {
  namespace pp = ::moe::pipeline;
  options.stages = pipelineStages;
  options.virtualStages = virtualStages;
  options.microbatches = numMicrobatches();
  pp::ScheduleKind kind = scheduleKind;
  if (virtualStages > 1 && kind == pp::ScheduleKind::OneFOneB)
    kind = pp::ScheduleKind::Interleaved1F1B;
  return pp::buildSchedule(kind, options);
}

/// Simulates `schedule`: prints its timeline and bubble fraction, and writes
/// the Chrome trace when asked.
static LogicalResult reportSchedule(const ::moe::pipeline::Schedule &schedule,
                                    const ::moe::pipeline::ScheduleOptions &options,
                                    bool print) {
  namespace pp = ::moe::pipeline;
  pp::ErrorOr<pp::Timeline> timeline = pp::simulate(schedule, options);
  if (!timeline) {
    llvm::errs() << "moec: error: pipeline schedule: " << timeline.getError()
                 << "\n";
    return failure();
  }
  if (print)
    llvm::outs() << "schedule " << pp::toString(schedule.kind) << ", "
                 << options.microbatches << " microbatches: bubble "
                 << llvm::format("%.1f%%", 100 * timeline->bubbleFraction)
                 << " of the step\n"
                 << pp::toText(*timeline);
  if (!pipelineTrace.empty()) {
    std::string error;
    auto file = openOutputFile(pipelineTrace, &error);
    if (!file) {
      llvm::errs() << "moec: error: " << error << "\n";
      return failure();
    }
    file->os() << pp::toChromeTrace(*timeline);
    file->keep();
  }
  return success();
}

/// Bytes from "80GiB", "512MiB", "1.5GB", "4000000" (powers of 1024 for
/// KiB/MiB/GiB/TiB, of 1000 for KB/MB/GB/TB); none for anything else.
static std::optional<uint64_t> parseBytes(StringRef text) {
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

/// Compiles the step for one microbatch: divides the batch of every
/// moe.transformer by the microbatches.
static LogicalResult splitBatch(ModuleOp module, unsigned parts) {
  if (parts == 1)
    return success();
  bool found = false;
  for (auto transformer : module.getOps<mlir::moe::TransformerOp>()) {
    found = true;
    uint64_t batch = transformer.getBatch();
    if (batch % parts != 0)
      return transformer.emitError()
             << "--microbatches " << parts << " does not divide the batch of "
             << batch << " sequences";
    transformer.setBatch(batch / parts);
  }
  if (!found)
    return module.emitError() << "--microbatches needs the model's batch "
                                 "(moe.transformer)";
  module->setAttr(mlir::moe::kMicrobatchesAttrName,
                  Builder(module.getContext()).getI64IntegerAttr(parts));
  return success();
}

/// --emit-sbatch: the batch script running `artifact` on the compiled mesh.
static LogicalResult writeSbatch(ModuleOp module, StringRef artifact,
                                 const char *argv0) {
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

/// The moec target of a GPU: the first known one of its compute
/// capability (h100 for sm_90), else the CPU.
static std::string targetOf(const mlir::moe::GpuSpec &gpu) {
  const ::moe::caps::Capabilities *known = mlir::moe::capabilitiesOf(gpu);
  return known ? std::string(known->target) : std::string("cpu");
}

/// --plan: searches, prints the best plans and sets the options that
/// compile the best; `done` when only the plans were asked for.
static LogicalResult applyPlan(ModuleOp module, bool &done) {
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
  llvm::Expected<mlir::moe::ClusterSpec> cluster =
      mlir::moe::loadCluster(clusterFile);
  if (!cluster) {
    llvm::errs() << "moec: error: " << llvm::toString(cluster.takeError())
                 << "\n";
    return failure();
  }
  if (planGpus > cluster->gpus()) {
    llvm::errs() << "moec: error: --gpus " << planGpus << " exceeds the "
                 << cluster->gpus() << " GPUs of " << clusterFile << "\n";
    return failure();
  }
  FailureOr<mlir::moe::ModelShape> model = mlir::moe::modelShapeOf(module);
  if (failed(model))
    return failure();
  std::string error;
  FailureOr<mlir::moe::PlanConstraints> constraints =
      mlir::moe::parsePlanConstraints(planFix, error);
  if (failed(constraints)) {
    llvm::errs() << "moec: error: --plan-fix: " << error << "\n";
    return failure();
  }
  constraints->keepOverMemory = planKeepOverMemory;
  FailureOr<mlir::moe::SoftwareTraits> software =
      mlir::moe::parseSoftwareTraits(planSoftware, error);
  if (failed(software)) {
    llvm::errs() << "moec: error: --plan-software: " << error << "\n";
    return failure();
  }
  // Plans for moe-run are plans its backend runs; another software's run
  // (--plan-software runtime=other) is only predicted.
  const mlir::moe::Target &planTarget =
      *mlir::moe::lookupTarget(targetOf(cluster->gpu));
  if (software->moeRun)
    constraints->backend = &planTarget.capabilities;
  mlir::moe::PlanSearchResult result = mlir::moe::searchPlans(
      *model, *cluster, planGpus, planGlobalBatch, *constraints, *software,
      std::max(1u, planTop.getValue()));
  mlir::moe::printPlans(result, *model, *cluster, planGpus, planGlobalBatch,
                        llvm::outs());
  if (result.considered == 0) {
    llvm::errs() << "moec: error: no plan for " << planGpus
                 << " GPUs: no split into tp x pp x dp divides the model's "
                    "heads, widths and layers and the global batch of "
                 << planGlobalBatch << "\n";
    return failure();
  }
  if (result.best.empty()) {
    llvm::errs() << "moec: error: no plan fits " << planGpus << " x "
                 << cluster->gpu.name << " (" << result.considered
                 << " considered, " << result.rejectedMemory
                 << " over memory)";
    if (result.rejectedBackend > 0)
      llvm::errs() << "; " << result.rejectedBackend
                   << " of them not runnable: " << result.backendReason;
    llvm::errs() << "\n";
    return failure();
  }
  done = planOnly;
  if (done)
    return success();
  const mlir::moe::PlanCost &chosen = result.best.front();
  const mlir::moe::ParallelPlan &best = chosen.plan;
  for (auto transformer : module.getOps<mlir::moe::TransformerOp>())
    transformer.setBatch(planGlobalBatch);
  meshSpec = best.meshSpec();
  pipelineStages = best.pp;
  virtualStages = best.virtualStages;
  scheduleKind = best.schedule;
  microbatches = chosen.microbatches;
  target = targetOf(cluster->gpu);
  if (best.fp8) {
    std::string recipe = mlir::moe::fp8RecipeOf(planTarget.capabilities);
    if (cluster->gpu.fp8Tflops > 0 && !recipe.empty()) {
      fp8Gemms = "experts";
      fp8Scaling = recipe;
    }
    fp8Dispatch = best.ep > 1 && (planTarget.capabilities.fp8Dispatch ||
                                  !constraints->backend);
  }
  llvm::outs() << "compiling #1: --mesh " << meshSpec << " --pp "
               << pipelineStages << " --virtual-stages " << virtualStages
               << " --microbatches " << microbatches << " --target " << target
               << "\n";
  // The plan's data-parallel reductions overlap the backward, as moe-run's
  // communication thread does.
  llvm::outs() << "  run it with moe-run --async-collectives";
  if (chosen.expertChunks > 1)
    llvm::outs() << " --expert-chunks " << chosen.expertChunks;
  llvm::outs() << " (the plan overlaps gradient reductions with the backward"
               << (chosen.expertChunks > 1
                       ? ", and the expert exchange with the expert GEMMs"
                       : "")
               << ")\n";
  if (best.remat != mlir::moe::Remat::None)
    llvm::outs() << "  remat=" << mlir::moe::toString(best.remat)
                 << " is the plan's; moec recomputes in the compiled step "
                    "only under --memory-budget\n";
  return success();
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  mlir::moe::registerMoEPasses();
  mlir::moe::registerTrainingPipeline();
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

  if (planSearch) {
    bool done = false;
    if (failed(applyPlan(*module, done)))
      return 1;
    if (done)
      return 0;
  }

  if (!meshSpec.empty()) {
    std::string error;
    auto axes = mlir::moe::parseMeshSpec(meshSpec, error);
    if (failed(axes)) {
      llvm::errs() << "moec: error: --mesh: " << error << "\n";
      return 1;
    }
    mlir::moe::setMesh(*module, *axes);
  }
  mlir::moe::MeshOp mesh = mlir::moe::getMesh(*module);

  // Two halves, so that --report=sharding can show the global step with
  // its shardings before partitioning rewrites it per rank.
  PassManager front(&context), back(&context);
  if (failed(applyPassManagerCLOptions(front)) ||
      failed(applyPassManagerCLOptions(back)))
    return 1;
  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope timingScope = timing.getRootScope();
  front.enableTiming(timingScope);
  back.enableTiming(timingScope);
  bool sharded = static_cast<bool>(mesh);
  if (passPipeline.hasAnyOccurrences()) {
    auto errorHandler = [&](const Twine &message) {
      return emitError(UnknownLoc::get(&context)) << message;
    };
    if (failed(passPipeline.addToPipeline(front, errorHandler)))
      return 1;
  } else {
    std::optional<mlir::moe::Fp8Options> fp8;
    if (!mlir::moe::lookupTarget(target)) {
      llvm::errs() << "moec: error: unknown target '" << target
                   << "': expected " << mlir::moe::knownTargetList() << "\n";
      return 1;
    }
    if (!fp8Gemms.empty() || fp8Dispatch) {
      fp8.emplace();
      fp8->gemms = fp8Gemms.empty() ? std::string("none") : fp8Gemms.getValue();
      fp8->scaling = fp8Scaling;
      fp8->block = fp8Block;
      fp8->dispatch = fp8Dispatch;
      fp8->amaxHistory = fp8AmaxHistory;
      fp8->target = target;
    }
    mlir::moe::buildTrainingFrontend(front, sharded, fp8);
  }
  bool wantsSharding = llvm::is_contained(reports, Report::Sharding);
  if (isPipelined() && failed(splitBatch(*module, numMicrobatches())))
    return 1;
  if (failed(front.run(*module)))
    return 1;
  auto step = module->lookupSymbol<func::FuncOp>(stepFunction);
  if (!reports.empty() && !step) {
    llvm::errs() << "moec: error: no function '" << stepFunction
                 << "' to report on\n";
    return 1;
  }
  if (wantsSharding &&
      failed(mlir::moe::printShardingReport(*module, step, llvm::outs())))
    return 1;
  std::optional<::moe::pipeline::Schedule> schedule;
  std::optional<mlir::moe::SplitPipelineStagesOptions> split;
  // split's options refer to these.
  std::vector<unsigned> unitStages, rankSlots;
  if (llvm::is_contained(reports, Report::Pipeline) || isPipelined()) {
    FailureOr<std::vector<mlir::moe::PipelineUnit>> units =
        mlir::moe::pipelineUnits(*module, step);
    if (failed(units))
      return 1;
    FailureOr<mlir::moe::PipelinePlan> plan = mlir::moe::planPipeline(
        *module, std::move(*units), pipelineStages, virtualStages);
    if (failed(plan))
      return 1;
    if (llvm::is_contained(reports, Report::Pipeline))
      mlir::moe::printPipelineReport(*plan, llvm::outs());
    ::moe::pipeline::ScheduleOptions options;
    auto built = buildPipelineSchedule(options);
    if (!built) {
      llvm::errs() << "moec: error: pipeline schedule: " << built.getError()
                   << "\n";
      return 1;
    }
    if (failed(reportSchedule(*built, options,
                              llvm::is_contained(reports, Report::Pipeline))))
      return 1;
    schedule = std::move(*built);
    split.emplace();
    split->function = stepFunction;
    // Model stage i is chunk i of the cut, in model order.
    for (auto [stage, chunk] : llvm::enumerate(plan->chunks))
      for (unsigned unit = chunk.firstUnit; unit <= chunk.lastUnit; ++unit)
        unitStages.push_back(stage);
    split->unitStages = unitStages;
    split->ranks = pipelineStages;
    split->splitWeightGradients =
        schedule->kind == ::moe::pipeline::ScheduleKind::ZeroBubble;
    for (int slots : ::moe::pipeline::peakMicrobatchSlots(*schedule))
      rankSlots.push_back(slots);
    split->slots = rankSlots;
  }
  std::optional<mlir::moe::RematerializeOptions> remat;
  if (!memoryBudget.empty()) {
    std::optional<uint64_t> bytes = parseBytes(memoryBudget);
    if (!bytes) {
      llvm::errs() << "moec: error: --memory-budget: expected a size like "
                      "80GiB, 512MiB or 4000000, found '"
                   << memoryBudget << "'\n";
      return 1;
    }
    remat.emplace();
    remat->function = stepFunction;
    remat->budget = *bytes;
  }
  if (!passPipeline.hasAnyOccurrences())
    mlir::moe::buildTrainingBackend(back, sharded, split, remat);
  if (failed(back.run(*module)))
    return 1;
  if (wantsSharding && mesh)
    mlir::moe::printCollectivesReport(step, llvm::outs());
  if (llvm::is_contained(reports, Report::Memory))
    mlir::moe::printMemoryReport(mlir::moe::computeModelStatistics(*module, step),
                           llvm::outs());
  if (llvm::is_contained(reports, Report::Cost)) {
    if (clusterFile.empty()) {
      llvm::errs() << "moec: error: --report=cost needs --cluster FILE\n";
      return 1;
    }
    llvm::Expected<mlir::moe::ClusterSpec> cluster =
        mlir::moe::loadCluster(clusterFile);
    if (!cluster) {
      llvm::errs() << "moec: error: " << llvm::toString(cluster.takeError())
                   << "\n";
      return 1;
    }
    mlir::moe::printCostReport(
        mlir::moe::estimateStepCost(*module, step, *cluster,
                                    schedule ? &*schedule : nullptr),
        *cluster,
        llvm::outs());
  }

  std::string path = outputPath();
  auto output = openOutputFile(path, &error);
  if (!output) {
    llvm::errs() << "moec: error: " << error << "\n";
    return 1;
  }
  if (emitKind == Emit::MLIR) {
    module->print(output->os());
  } else if (failed(mlir::moe::writeArtifact(*module, stepFunction, seed,
                                             output->os(),
                                             schedule ? &*schedule : nullptr,
                                             target))) {
    return 1;
  }
  output->keep();
  if (!emitSbatch.empty() && failed(writeSbatch(*module, path, argv[0])))
    return 1;
  return 0;
}
