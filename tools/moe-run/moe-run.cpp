//===- moe-run.cpp - train a compiled moe artifact ------------------------===//
//
//   moe-run model.moebin --data tokens.bin --steps 300 [options]
//   mpirun -np N moe-run model.moebin ...   (an artifact of moec --mesh)
//   moe-run --describe model.moebin         (print the program)
//   moe-run generate model.moebin --load W --prompt-tokens 1,2 --max-new 50
//
// Exit codes: 0 success, 1 a runtime error (message on stderr), 2 bad usage.
// In a job of several ranks, a rank that fails ends the whole job, so that
// its peers do not wait for it in a collective.
//
//===----------------------------------------------------------------------===//
#include "Flags.h"
#include "GenerateCommand.h"

#include "moe/Runtime/Artifact/Disassemble.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Backend/Backend.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Train/Trainer.h"

#include "absl/strings/match.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <limits>
#include <string>

using namespace moe::rt;
using namespace moe::tools;

static const char *kUsage = R"(usage: moe-run MODEL.moebin --data PATH [options]
       moe-run --describe MODEL.moebin
       moe-run --model-config MODEL.moebin
       moe-run generate MODEL.moebin --load PATH --prompt-tokens IDS --max-new N
               (decode from trained weights; moe-run generate --help)

Trains a model compiled by moec on a token dataset and prints its loss curve.
An artifact compiled with moec --mesh for N ranks runs under mpirun -np N;
rank 0 prints and writes the metrics.

  --describe             verify the artifact and print its program (buffers
                         and instructions with named attributes), then exit
  --model-config         verify the artifact and print its model's
                         configuration as JSON (a step dump's config.json,
                         without the step), then exit
data:
  --data PATH            flat token file (nanoGPT .bin) or Megatron prefix/.bin+.idx
  --data-format F        auto (default), flat or megatron
  --data-dtype T         token type of flat files: uint16 (default) or uint32
  --data-seed N          seed of the batch sampler (default 0)
training:
  --steps N              steps to run (required)
  --start-step N         steps already done: the run starts at step N+1 (its
                         LR schedule position and batches; default 0)
  --seed N               parameter initialisation seed (default: the artifact's)
  --device D             cpu (default) or cuda (a GPU, the CUDA backend)
  --virtual-gpu NAME     with --device cuda: run the CUDA backend on the
                         virtual GPU emulating NAME (a100, h100 or h200) on
                         the CPU, for testing without a GPU (never chosen
                         without this flag)
  --threads N            CPU kernel threads (default: OPENBLAS_NUM_THREADS or
                         OMP_NUM_THREADS, else this process's cores shared
                         among the node's ranks)
loss checks (a non-finite loss or gradient norm always stops the run):
  --max-loss X           stop when a step's loss exceeds X (default: 10 x
                         ln(vocab), which no healthy run reaches: it starts
                         near ln(vocab) and falls; 0 or inf: no limit)
  --loss-spike-factor F  stop when a step's loss exceeds F (> 1) times the
                         median loss of the previous --loss-spike-window
                         steps (default 0: off)
  --loss-spike-window N  steps in that median (default 100); judged once
                         N steps have run
  --loss-spike A         error (default) or warn: print a warning and go on
weights and outputs:
  --load PATH            start from an HF checkpoint: a directory with
                         model.safetensors or model.safetensors.index.json
                         and its shards, the index's path, or one
                         .safetensors file (F32,
                         BF16, F16); any mesh, each rank reading its blocks
  --save PATH            write the trained weights in HF's layout: a
                         .safetensors file, or a directory's
                         model.safetensors (one rank)
  --save-dtype fp32|bf16 the dtype --save writes (default fp32; bf16 rounds
                         the fp32 masters to nearest even)
  --eval-data PATH       a held-out token file (read as --data-format and
                         --data-dtype say): the LM head's cross-entropy on
                         fixed batches of it, computed without changing
                         anything, as eval_loss in the progress line and the
                         metrics
  --eval-every N         after every N steps (and always after the last)
  --eval-batches K       batches per evaluation (default 4, or fewer if the
                         file holds fewer); at most the file's distinct
                         windows of seq + 1 tokens make
  --checkpoint-dir DIR   write distributed checkpoints under DIR (every rank
                         its shards, and a manifest), after the last step
  --checkpoint-every N   and every N steps
  --checkpoint-keep N    keep only the newest N checkpoints under the
                         directory (N >= 1; default: all)
  --checkpoint-async     write each checkpoint on a background thread from
                         a host copy while the next steps run (committed
                         at the first step boundary after every rank's
                         write; one in flight at a time)
  --resume PATH          continue from a checkpoint (or the newest under PATH):
                         weights, optimizer state and step; --steps more run
  --metrics FILE         one JSON line of metrics per step, "step" numbered
                         from 1 as in the progress lines (appended to when
                         --start-step > 0, else overwritten)
  --tensorboard DIR      the same metrics as TensorBoard event files in DIR
                         (loss, grad_norm, lr, tokens_per_s, flops_per_s,
                         ce_loss, aux_loss, ...; a new file per run)
  --plot FILE.png        this run's loss (and eval loss) and tokens/s curves,
                         redrawn with each progress line
  --dump-step DIR        record one step for test/reference/ (see --dump-step-at)
  --dump-step-at N       the step to record, numbered as in the progress
                         lines (default: the first)
  --log-every N          print every N steps (default 1)
  --profile              print the time spent per kernel at the end
  --expert-chunks N      split expert-parallel layers' tokens into N chunks
                         whose all-to-alls overlap each other's expert
                         compute (default 1: no overlap)
  --async-collectives    run gradient reductions and FSDP all-gathers (one
                         layer ahead) on a communication thread
  --trace FILE           write the steps' timeline, compute and communication
                         tracks, as a Chrome trace (Perfetto); each rank of a
                         job writes FILE with .rank<r> before the extension
  --quiet                print nothing but errors and warnings
  --no-plot              do not print the loss curve

An output that is an input (or lies in an input directory) is refused, as is
an option given twice.
)";

namespace {
/// What the command line asks for.
struct Command {
  train::TrainOptions options;
  bool help = false;
  /// --describe or --model-config: the flag, which takes the artifact and
  /// nothing else.
  std::string inspect;
};
} // namespace

static Command parseArgs(int argc, char **argv) {
  Command command;
  train::TrainOptions &options = command.options;
  bool haveSteps = false;
  std::string device = "cpu";
  OptionsSeen seen;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (absl::StartsWith(arg, "-"))
      seen.note(arg);
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw UsageError{arg + " expects a value"};
      refuseOptionAsValue(arg, argv[i + 1]);
      return argv[++i];
    };
    if (arg == "--describe" || arg == "--model-config") {
      command.inspect = arg;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      command.help = true;
      return command;
    } else if (arg == "--data") {
      options.dataPath = value();
    } else if (arg == "--data-format") {
      options.dataOptions.format = parseDataFormat(value());
    } else if (arg == "--data-dtype") {
      options.dataOptions.flatDtype = parseDataDtype(value());
    } else if (arg == "--data-seed") {
      options.dataSeed = parseSeed(arg, value());
    } else if (arg == "--steps") {
      options.steps = parseInt(arg, value());
      haveSteps = true;
    } else if (arg == "--start-step") {
      options.startStep = parseInt(arg, value());
    } else if (arg == "--seed") {
      options.initSeed = parseSeed(arg, value());
    } else if (arg == "--threads") {
      options.threads = parseThreads(arg, value());
    } else if (arg == "--checkpoint-dir") {
      options.checkpointDir = value();
    } else if (arg == "--checkpoint-keep") {
      options.checkpointKeep = parseInt(arg, value());
      if (options.checkpointKeep < 1)
        throw UsageError{"--checkpoint-keep must be >= 1 (the newest "
                         "checkpoint always stays)"};
    } else if (arg == "--eval-data") {
      options.evalDataPath = value();
    } else if (arg == "--eval-every") {
      options.evalEvery = parseInt(arg, value());
      if (options.evalEvery < 1)
        throw UsageError{"--eval-every must be >= 1"};
    } else if (arg == "--eval-batches") {
      options.evalBatches = parseInt(arg, value());
      if (options.evalBatches < 1)
        throw UsageError{"--eval-batches must be >= 1"};
    } else if (arg == "--checkpoint-async") {
      options.checkpointAsync = true;
    } else if (arg == "--checkpoint-every") {
      options.checkpointEvery = parseInt(arg, value());
      if (options.checkpointEvery < 0)
        throw UsageError{"--checkpoint-every must be >= 0"};
    } else if (arg == "--resume") {
      options.resumePath = value();
    } else if (arg == "--device") {
      device = value();
    } else if (arg == "--virtual-gpu") {
      options.virtualGpu = value();
      if (options.virtualGpu.empty())
        throw UsageError{"--virtual-gpu needs a device name: a100, h100 or h200"};
    } else if (arg == "--load") {
      options.loadPath = value();
    } else if (arg == "--save") {
      options.savePath = value();
    } else if (arg == "--save-dtype") {
      absl::StatusOr<train::SaveDType> dtype = train::parseSaveDType(value());
      if (!dtype.ok())
        throw UsageError{"--save-dtype: " + std::string(dtype.status().message())};
      options.saveDType = *dtype;
    } else if (arg == "--metrics") {
      options.metricsPath = value();
    } else if (arg == "--tensorboard") {
      options.tensorboardDir = value();
    } else if (arg == "--plot") {
      options.plotPath = value();
    } else if (arg == "--trace") {
      options.tracePath = value();
    } else if (arg == "--async-collectives") {
      options.asyncCollectives = true;
    } else if (arg == "--expert-chunks") {
      int64_t chunks = parseInt(arg, value());
      if (chunks <= 0 || chunks > 1024)
        throw UsageError{"--expert-chunks must be in [1, 1024]"};
      options.expertChunks = chunks;
    } else if (arg == "--dump-step") {
      options.dumpStepDir = value();
    } else if (arg == "--dump-step-at") {
      options.dumpStepAt = parseInt(arg, value());
    } else if (arg == "--max-loss") {
      options.lossLimits.maxLoss = parseNumber(arg, value());
    } else if (arg == "--loss-spike-factor") {
      options.lossLimits.spikeFactor = parseNumber(arg, value());
    } else if (arg == "--loss-spike-window") {
      options.lossLimits.spikeWindow = parseInt(arg, value());
    } else if (arg == "--loss-spike") {
      std::string action = value();
      if (action == "error")
        options.lossLimits.spikeAction = train::LossSpikeAction::Error;
      else if (action == "warn")
        options.lossLimits.spikeAction = train::LossSpikeAction::Warn;
      else
        throw UsageError{"unknown --loss-spike action '" + action +
                         "': expected error or warn"};
    } else if (arg == "--log-every") {
      options.logEvery = parseInt(arg, value());
    } else if (arg == "--profile") {
      options.profile = true;
    } else if (arg == "--quiet") {
      options.quiet = true;
    } else if (arg == "--no-plot") {
      options.plot = false;
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError{"unknown option '" + arg + "'"};
    } else if (options.artifactPath.empty()) {
      options.artifactPath = arg;
    } else {
      throw UsageError{"unexpected argument '" + arg + "'"};
    }
  }
  if (options.artifactPath.empty())
    throw UsageError{"no artifact given"};
  if (!command.inspect.empty()) {
    if (argc != 3)
      throw UsageError{command.inspect + " takes the artifact and nothing else"};
    return command;
  }
  if (options.dataPath.empty())
    throw UsageError{"--data is required"};
  // --steps 0 only converts: a checkpoint resumed and saved (--save) as
  // one consolidated HF file.
  bool converts = options.steps == 0 && !options.resumePath.empty() &&
                  !options.savePath.empty();
  if (!haveSteps || (options.steps <= 0 && !converts))
    throw UsageError{"--steps must be given and positive (0 only with "
                     "--resume and --save, to export a checkpoint)"};
  if (options.startStep < 0 || options.logEvery <= 0)
    throw UsageError{"--start-step must be >= 0 and --log-every > 0"};
  // The artifact takes the step as an i32 input; refuse a run that would
  // outgrow it before loading anything, not when it gets there.
  constexpr int64_t kMaxStep = std::numeric_limits<int32_t>::max();
  if (options.steps > kMaxStep - options.startStep)
    throw UsageError{
        "--start-step + --steps must be <= " + std::to_string(kMaxStep) +
        " (the step is an i32 input of the artifact)"};
  if (options.evalDataPath.empty() &&
      (options.evalEvery > 0 || options.evalBatches > 0))
    throw UsageError{options.evalEvery > 0
                         ? "--eval-every needs --eval-data"
                         : "--eval-batches needs --eval-data"};
  if (options.checkpointDir.empty() &&
      (options.checkpointEvery > 0 || options.checkpointKeep > 0 ||
       options.checkpointAsync))
    throw UsageError{options.checkpointEvery > 0
                         ? "--checkpoint-every needs --checkpoint-dir"
                     : options.checkpointKeep > 0
                         ? "--checkpoint-keep needs --checkpoint-dir"
                         : "--checkpoint-async needs --checkpoint-dir"};
  if (options.dumpStepAt) {
    if (options.dumpStepDir.empty())
      throw UsageError{"--dump-step-at needs --dump-step"};
    // Given as people number steps, kept as the 0-based index.
    int64_t first = options.startStep + 1, last = options.startStep +
                                                  options.steps;
    int64_t number = *options.dumpStepAt;
    if (number < first || number > last)
      throw UsageError{"--dump-step-at " + std::to_string(number) +
                       " is not a step of this run, which runs steps " +
                       std::to_string(first) + " to " + std::to_string(last)};
    options.dumpStepAt = number - 1;
  }
  if (absl::Status limits = train::validateLossLimits(options.lossLimits);
      !limits.ok())
    throw UsageError{std::string(limits.message())};
  const std::vector<std::string> &devices = backendNames();
  if (std::find(devices.begin(), devices.end(), device) == devices.end()) {
    std::string known;
    for (const std::string &name : devices)
      known += (known.empty() ? "" : " or ") + name;
    throw UsageError{"unknown device '" + device + "': expected " + known};
  }
  options.device = device;
  if (!options.virtualGpu.empty() && device != "cuda")
    throw UsageError{"--virtual-gpu runs the CUDA backend: it needs --device cuda"};
  return command;
}

/// An output over an input is refused before anything is read or written:
/// --save over the weights --load reads, --metrics over the data, ...
static void checkOutputs(const train::TrainOptions &options) {
  std::vector<io::FlagPath> inputs = {{"the artifact", options.artifactPath},
                                      {"--load", options.loadPath}};
  addDataInputs(inputs, "--data", options.dataPath, options.dataOptions);
  addDataInputs(inputs, "--eval-data", options.evalDataPath,
                options.dataOptions);
  // Checkpoints go to new directories under --checkpoint-dir, so a run
  // may resume from the directory it goes on writing to.
  checkOutputsAreNotInputs(inputs, {{{"--checkpoint-dir",
                                      options.checkpointDir},
                                     /*directory=*/true}});
  inputs.push_back({"--resume", options.resumePath});
  std::string saved = options.savePath;
  if (!saved.empty() && !absl::EndsWith(saved, ".safetensors"))
    saved += "/model.safetensors";
  checkOutputsAreNotInputs(
      inputs, {{{"--save", saved}},
               {{"--metrics", options.metricsPath}},
               {{"--plot", options.plotPath}},
               {{"--trace", options.tracePath}},
               {{"--tensorboard", options.tensorboardDir}, /*directory=*/true},
               {{"--dump-step", options.dumpStepDir}, /*directory=*/true}});
}

/// Refused before any rank reads the artifact: a usage error from rank 0
/// instead of every rank failing and aborting the job.
static void checkRanks(const train::TrainOptions &options, int ranks) {
  if (ranks == 1)
    return;
  if (std::optional<train::WholeTensorFeature> feature =
          train::requestedWholeTensorFeature(options))
    throw UsageError{std::string(feature->flag) + " is not supported with " +
                     std::to_string(ranks) + " ranks yet"};
}

int main(int argc, char **argv) {
#if defined(__GLIBC__)
  // The CPU kernels allocate their scratch per call (megabytes for an
  // experts op). glibc serves blocks that large by mmap and unmaps them on
  // free, so every step faulted the same pages in again (8k page faults
  // per step of bench/models/cpu-step-moe.mlir, 12% of its one-thread
  // step).
  // Serve them from the heap, up to glibc's largest threshold, and keep
  // freed memory for the next step: the resident size stays the peak.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
  // generate runs one process on one rank's program: no world.
  if (argc > 1 && std::strcmp(argv[1], "generate") == 0)
    return runGenerateCommand(std::vector<std::string>(argv + 2, argv + argc));
  // MPI first: under a launcher this process learns its rank; without one
  // it is a world of one.
  absl::StatusOr<std::unique_ptr<comm::World>> world =
      comm::World::start(&argc, &argv);
  if (!world.ok()) {
    std::cerr << "moe-run: error: " << world.status().message() << "\n";
    return 1;
  }
  int rank = (*world)->rank(), ranks = (*world)->size();
  // Every rank parses the same command line; one of them says so.
  bool speaks = rank == 0;
  Command command;
  try {
    command = parseArgs(argc, argv);
    if (!command.help && command.inspect.empty()) {
      checkRanks(command.options, ranks);
      checkOutputs(command.options);
    }
  } catch (const UsageError &error) {
    if (speaks)
      std::cerr << "moe-run: error: " << error.message << "\n\n" << kUsage;
    return 2;
  }
  if (command.help) {
    if (speaks)
      std::cout << kUsage;
    return 0;
  }
  if (!command.inspect.empty()) {
    absl::StatusOr<Program> program =
        readArtifact(command.options.artifactPath);
    if (!program.ok()) {
      std::cerr << "moe-run: error: " << program.status().message() << "\n";
      return 1;
    }
    if (!speaks)
      return 0;
    if (command.inspect == "--describe") {
      std::cout << disassemble(*program);
    } else if (program->model.configJson.empty()) {
      std::cerr << "moe-run: error: " << command.options.artifactPath
                << ": the artifact records no model configuration\n";
      return 1;
    } else {
      std::cout << program->model.configJson << "\n";
    }
    return 0;
  }
  command.options.world = world->get();
  absl::StatusOr<train::TrainSummary> summary =
      train::train(command.options, std::cout);
  if (!summary.ok()) {
    // One write, so that the lines of several ranks do not interleave.
    std::string where = ranks > 1 ? "rank " + std::to_string(rank) + ": " : "";
    std::cerr << "moe-run: error: " + where +
                     std::string(summary.status().message()) + "\n";
    // Peers may be waiting for this rank in a collective: end them too,
    // unless every rank stops here with this error (the world then
    // finalises as on success).
    if (ranks > 1 && !train::isOnEveryRank(summary.status()))
      (*world)->abort(1);
    return 1;
  }
  return 0;
}
