//===- Trainer.cpp - the training loop of moe-run -------------------------===//
#include "moe/Runtime/Train/Trainer.h"
#include "moe/Runtime/Artifact/Capabilities.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Backend/Backend.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/IO/Metrics.h"
#include "moe/Runtime/IO/Plot.h"
#include "moe/Runtime/IO/ProcessMemory.h"
#include "moe/Runtime/IO/TensorBoard.h"
#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/Train/AsyncCheckpoint.h"
#include "moe/Runtime/Train/Checkpoint.h"
#include "moe/Runtime/Train/ExpertLoadProbe.h"
#include "moe/Runtime/Train/HfCheckpoint.h"
#include "moe/Runtime/Train/StepDump.h"
#include "moe/Runtime/Train/Weights.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cmath>

namespace moe::rt::train {

namespace {
/// The state of one run: program, weights, data and outputs.
class Run {
public:
  Run(const TrainOptions &options, std::ostream &out)
      : options(options), out(out),
        reports(!options.world || options.world->rank() == 0),
        quiet(options.quiet || !reports) {}

  absl::Status setUp();
  absl::StatusOr<TrainSummary> loop();

private:
  /// --resume: the checkpoint's weights, optimizer state and step.
  absl::Status resume();
  /// Whether step `step` (0-based) is this run's last, and whether it ends
  /// a multiple of `every` steps (never for 0).
  bool isLastStep(int64_t step) const {
    return step + 1 == firstStep + options.steps;
  }
  static bool everyNth(int64_t step, int64_t every) {
    return every > 0 && (step + 1) % every == 0;
  }
  /// --checkpoint-dir: after step `step` (0-based) if it is due.
  absl::Status checkpointAfter(int64_t step);
  /// `everyone`, created on first use (a collective call of every rank).
  absl::Status joinEveryone();
  /// Every id of `data` against the vocabulary, before the first step;
  /// `flag` ("--eval-data"), if given, leads the error.
  absl::Status checkVocabulary(const data::TokenDataset &data,
                               absl::string_view flag = {});
  /// Document masking: where the documents of the data begin (the
  /// model's eos_token_id, a Megatron index's offsets), or an error naming
  /// what is missing.
  absl::Status setUpDocuments();
  /// The backend of --device, with its weights initialised, loaded or
  /// resumed.
  absl::Status setUpBackend(Program program);
  absl::StatusOr<StepResult> runStep(int64_t step, const StepHooks &hooks);
  /// This rank's rows of batch `step` drawn by `from` into tokens and
  /// targets (and positions, with document masking).
  absl::Status fillBatch(const data::BatchSampler &from, int64_t step);
  /// --eval-data: its dataset and sampler, and whether the backend can.
  absl::Status setUpEvaluation();
  /// The mean loss of --eval-data's fixed batches, if step `step` (0-based)
  /// is one after which to evaluate.
  absl::StatusOr<std::optional<double>> evaluateAfter(int64_t step);
  absl::Status checkSingleRankFeatures(const Program &program) const;
  absl::Status runOne(int64_t step, TrainSummary &summary);
  void printHeader() const;
  void printProfile(double totalSeconds) const;
  /// Tokens of one step over all ranks.
  int64_t globalTokensPerStep() const;
  /// Rows of the global batch per step, over all ranks and microbatches.
  int64_t globalBatch() const;
  /// --trace's path, with ".rank<r>" before the extension in a job of
  /// several ranks.
  std::string tracePathOfRank() const;

  const TrainOptions &options;
  std::ostream &out;
  /// Rank 0 prints and writes the metrics; the others stay silent.
  bool reports;
  bool quiet;
  std::unique_ptr<Backend> backend;
  std::optional<data::TokenDataset> dataset;
  std::optional<data::BatchSampler> sampler;
  std::optional<data::TokenDataset> evalDataset;
  std::optional<data::BatchSampler> evalSampler;
  /// Batches per evaluation: --eval-batches, or its default.
  int64_t evalBatches = 0;
  std::optional<io::MetricsWriter> metrics;
  std::optional<io::TensorBoardWriter> tensorboard;
  /// --plot's curves: loss, eval loss and tokens/s by step.
  io::PlotSeries lossCurve{"loss", {}, 0x1f77b4},
      evalCurve{"eval_loss", {}, 0xd62728},
      throughputCurve{"tokens/s", {}, 0x2ca02c};
  absl::Status writePlot();
  std::optional<io::Trace> trace;
  std::optional<LossGuard> lossGuard;
  std::vector<int32_t> tokens, targets;
  /// Document masking: each token's position in its document (empty
  /// without), and the id ending a document in the token stream.
  std::vector<int32_t> positions;
  std::optional<int32_t> eosToken;
  /// The first step of this run: --start-step, or a resumed checkpoint's.
  int64_t firstStep = 0;
  /// Checkpoints: the group of every rank of the job.
  std::unique_ptr<comm::Group> everyone;
  /// --checkpoint-async's writer (declared after `everyone`, so that it
  /// is destroyed, joining its thread, first).
  std::optional<AsyncCheckpointWriter> asyncCheckpoints;
  /// Rank 0 prunes old checkpoints once a new one is complete.
  absl::Status pruneAfterCommit();
  /// The step's planned memory, and the resident memory before it.
  uint64_t plannedBytes = 0, residentAtStart = 0;
  /// Seconds and calls per opcode when profiling.
  std::vector<std::pair<double, int64_t>> opcodeTime =
      std::vector<std::pair<double, int64_t>>(kNumOpcodes);
};
} // namespace

/// Refuses a program needing more than the machine's physical memory
/// (`bytes`, hostBytesPerRank), instead of letting the kernel kill
/// the process half-way through initialisation.
static absl::Status checkFitsInMemory(uint64_t bytes, const std::string &path) {
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || pageSize <= 0)
    return absl::OkStatus();
  uint64_t physical = static_cast<uint64_t>(pages) * pageSize;
  if (bytes <= physical)
    return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s needs %.1f GiB per rank (parameters, optimizer state, arena and "
      "kernel workspace), "
      "this machine has %.1f GiB: shard it over more ranks",
      path, bytes / 1073741824.0, physical / 1073741824.0));
}

std::optional<WholeTensorFeature>
requestedWholeTensorFeature(const TrainOptions &options) {
  const std::pair<bool, WholeTensorFeature> features[] = {
      {!options.savePath.empty(), {"--save", "saving weights"}},
      {!options.dumpStepDir.empty(), {"--dump-step", "dumping a step"}}};
  for (const auto &[requested, feature] : features)
    if (requested)
      return feature;
  return std::nullopt;
}

absl::Status Run::checkSingleRankFeatures(const Program &program) const {
  // A dump records one pass of the instructions, which a step over
  // microbatches runs once per microbatch.
  if (program.pipeline.enabled() && !options.dumpStepDir.empty())
    return absl::UnimplementedError(absl::StrCat(
        "dumping a step (--dump-step) is not supported for a step over ",
        program.pipeline.microbatches, " microbatches yet"));
  int64_t ranks = program.numRanks();
  if (ranks == 1)
    return absl::OkStatus();
  if (std::optional<WholeTensorFeature> feature =
          requestedWholeTensorFeature(options))
    return absl::UnimplementedError(
        absl::StrCat(feature->what, " (", feature->flag,
                     ") is not supported with ", ranks, " ranks yet"));
  return absl::OkStatus();
}

absl::Status Run::resume() {
  if (options.resumePath.empty())
    return absl::OkStatus();
  absl::StatusOr<std::string> path = findCheckpoint(options.resumePath);
  if (!path.ok())
    return path.status();
  absl::StatusOr<CheckpointState> state =
      loadCheckpoint(backend->weights(), *path);
  if (!state.ok())
    return state.status();
  // The batches of a step come from (data seed, step): another seed would
  // not continue the run.
  if (state->dataSeed != options.dataSeed)
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", *path, " was trained with --data-seed ",
        state->dataSeed, "; resume it with the same seed, not ",
        options.dataSeed));
  firstStep = state->steps;
  if (!quiet)
    out << "resumed " << *path << " at step " << stepNumber(firstStep)
        << "\n";
  return absl::OkStatus();
}

absl::Status Run::joinEveryone() {
  if (everyone)
    return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<comm::Group>> group =
      backend->createGroup(backend->program().meshAxes);
  if (!group.ok())
    return group.status();
  everyone = std::move(*group);
  return absl::OkStatus();
}

absl::Status Run::setUpDocuments() {
  const Program &program = backend->program();
  if (program.positions < 0)
    return absl::OkStatus();
  nlohmann::json config =
      nlohmann::json::parse(program.model.configJson, nullptr,
                            /*allow_exceptions=*/false);
  if (config.is_object() && config.contains("eos_token_id") &&
      config["eos_token_id"].is_number_integer()) {
    int64_t eos = config["eos_token_id"].get<int64_t>();
    if (eos >= 0)
      eosToken = static_cast<int32_t>(eos);
  }
  if (!eosToken && dataset->format() != data::DatasetFormat::Megatron)
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact '", options.artifactPath,
        "' masks documents, but the model has no eos_token_id to find them "
        "in the flat token stream '",
        options.dataPath,
        "' (give moe.transformer eos_token_id, or moec --document-mask=ID, "
        "or train on a Megatron dataset, whose index lists its documents)"));
  positions.resize(tokens.size());
  return absl::OkStatus();
}

absl::Status Run::checkVocabulary(const data::TokenDataset &data,
                                  absl::string_view flag) {
  // Each rank checks its share of the stream and the ranks agree on the
  // first bad position: a job reads the file once, not once per rank, and
  // every rank reports the same id.
  int64_t vocab = backend->program().model.vocab;
  int64_t ranks = backend->numRanks(), rank = backend->rank();
  int64_t count = data.numTokens();
  int64_t bad = data.findOutsideVocab(
      vocab, data::shareBegin(count, ranks, rank),
      data::shareBegin(count, ranks, rank + 1));
  if (ranks > 1) {
    if (absl::Status s = joinEveryone(); !s.ok())
      return s;
    // An int64 as the two int32 words allGather copies.
    std::vector<int32_t> mine(2), all(2 * ranks);
    std::memcpy(mine.data(), &bad, sizeof(bad));
    if (absl::Status s = everyone->allGather(absl::MakeConstSpan(mine),
                                             absl::MakeSpan(all));
        !s.ok())
      return s;
    // Shares follow the ranks in stream order: the first rank that found
    // one holds the first bad position.
    bad = -1;
    for (int64_t r = 0; r < ranks && bad < 0; ++r)
      std::memcpy(&bad, &all[2 * r], sizeof(bad));
  }
  if (bad < 0)
    return absl::OkStatus();
  absl::Status error = data.outsideVocabError(bad, vocab);
  if (!flag.empty())
    error = absl::Status(error.code(),
                         absl::StrCat(flag, ": ", error.message()));
  return ranks > 1 ? onEveryRank(std::move(error)) : error;
}

absl::Status Run::checkpointAfter(int64_t step) {
  if (options.checkpointDir.empty())
    return absl::OkStatus();
  int64_t done = step + 1;
  bool last = isLastStep(step);
  bool due = everyNth(step, options.checkpointEvery);
  // A write in flight is committed at the first step boundary where every
  // rank has finished it.
  if (asyncCheckpoints && asyncCheckpoints->pending() && !due && !last) {
    absl::StatusOr<bool> committed = asyncCheckpoints->poll(*everyone);
    if (!committed.ok())
      return committed.status();
    return *committed ? pruneAfterCommit() : absl::OkStatus();
  }
  if (!last && !due)
    return absl::OkStatus();
  if (absl::Status s = joinEveryone(); !s.ok())
    return s;
  if (absl::Status s = backend->pullWeights(); !s.ok())
    return s;
  if (!options.checkpointAsync) {
    if (absl::Status s =
            saveCheckpoint(backend->weights(), *everyone, options.checkpointDir,
                           done, options.dataSeed);
        !s.ok())
      return s;
    return pruneAfterCommit();
  }
  if (!asyncCheckpoints)
    asyncCheckpoints.emplace();
  // Starting commits the previous checkpoint first.
  bool hadPrevious = asyncCheckpoints->pending();
  if (absl::Status s = asyncCheckpoints->start(backend->weights(), *everyone,
                                               options.checkpointDir, done,
                                               options.dataSeed);
      !s.ok())
    return s;
  if (hadPrevious)
    if (absl::Status s = pruneAfterCommit(); !s.ok())
      return s;
  // The run's last checkpoint is complete when the run ends.
  if (!last)
    return absl::OkStatus();
  absl::StatusOr<bool> committed = asyncCheckpoints->finish(*everyone);
  if (!committed.ok())
    return committed.status();
  return pruneAfterCommit();
}

absl::Status Run::pruneAfterCommit() {
  // Every rank has the new checkpoint once it is committed; rank 0 holds
  // the directory's manifests, so it removes the old ones.
  if (options.checkpointKeep > 0 && everyone->rank() == 0)
    return pruneCheckpoints(options.checkpointDir, options.checkpointKeep);
  return absl::OkStatus();
}

absl::Status Run::setUpBackend(Program program) {
  BackendOptions backendOptions;
  backendOptions.artifactPath = options.artifactPath;
  backendOptions.world = options.world;
  backendOptions.expertChunks = options.expertChunks;
  backendOptions.asyncCollectives = options.asyncCollectives;
  backendOptions.profile = options.profile;
  backendOptions.virtualGpu = options.virtualGpu;
  if (!options.tracePath.empty()) {
    trace.emplace(options.world ? options.world->rank() : 0);
    backendOptions.trace = &*trace;
  }
  absl::StatusOr<std::unique_ptr<Backend>> created = createBackend(
      options.device, std::make_shared<const Program>(std::move(program)),
      backendOptions);
  if (!created.ok())
    return created.status();
  backend = std::move(*created);
  // A trace records kernels as a host step runs them, or from a device's
  // events; a backend that does neither refuses it.
  if (!backend->tracesSteps() && !options.tracePath.empty())
    return absl::UnimplementedError(absl::StrCat(
        "--trace: the ", options.device, " backend records no trace"));
  if (options.asyncCollectives && !backend->asyncCollectives() && reports &&
      !options.quiet)
    out << "note: --async-collectives needs a partitioned, unpipelined "
           "artifact and an MPI that lets a second thread call it; "
           "collectives stay blocking\n";
  if (absl::Status s = backend->initialize(
          options.initSeed.value_or(backend->program().seed));
      !s.ok())
    return s;
  if (!options.loadPath.empty())
    if (absl::Status s = loadHfCheckpoint(backend->weights(), options.loadPath);
        !s.ok())
      return s;
  firstStep = options.startStep;
  if (absl::Status s = resume(); !s.ok())
    return s;
  if (!options.loadPath.empty() || !options.resumePath.empty())
    if (absl::Status s = backend->pushWeights(); !s.ok())
      return s;
  if (std::string line = backend->placementLine(); !line.empty() && !quiet)
    out << line << "\n";
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Run::runStep(int64_t step, const StepHooks &hooks) {
  return backend->runStep(tokens.data(), targets.data(), step, hooks,
                          positions.empty() ? nullptr : positions.data());
}

int64_t Run::globalTokensPerStep() const {
  return backend->tokensPerStep() * backend->batchBlock().count;
}

std::string Run::tracePathOfRank() const {
  if (backend->numRanks() == 1)
    return options.tracePath;
  // trace.json -> trace.rank3.json
  const std::string &path = options.tracePath;
  size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  std::string suffix = absl::StrCat(".rank", backend->rank());
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

int64_t Run::globalBatch() const {
  return backend->program().model.batch * backend->batchBlock().count *
         backend->microbatches();
}

absl::Status useKernelThreads(std::optional<int> threads) {
  if (threads)
    cpu::setNumThreads(*threads);
  else if (std::string error = cpu::threadVariableError(); !error.empty())
    return absl::InvalidArgumentError(error);
  return absl::OkStatus();
}

absl::Status Run::setUp() {
  if (absl::Status s = useKernelThreads(options.threads); !s.ok())
    return s;
  absl::StatusOr<Program> program = readArtifact(options.artifactPath);
  if (!program.ok())
    return program.status();
  // Before anything is opened for the device: what its backend lacks is
  // refused by name, the same on a machine with or without the device.
  if (absl::Status s = checkCapabilities(
          *program, absl::StrCat("artifact '", options.artifactPath, "'"),
          options.device, {options.expertChunks, options.asyncCollectives});
      !s.ok())
    return s;
  plannedBytes = hostBytesPerRank(options.device, *program);
  if (absl::Status s = checkFitsInMemory(plannedBytes, options.artifactPath);
      !s.ok())
    return s;
  if (absl::Status s = checkSingleRankFeatures(*program); !s.ok())
    return s;
  // OpenBLAS packs GEMM panels into buffers it touches on first use; a
  // GEMM large enough to use them all, now, keeps them out of the growth
  // measured from here on, which is then the step's own memory.
  {
    constexpr int64_t kWarmUp = 1024;
    std::vector<float> a(kWarmUp * kWarmUp, 1.0f), c(kWarmUp * kWarmUp);
    cpu::linearForward(a.data(), a.data(), c.data(), kWarmUp, kWarmUp,
                       kWarmUp);
  }
  residentAtStart = io::residentBytes();
  if (absl::Status s = setUpBackend(std::move(*program)); !s.ok())
    return s;

  const ModelInfo &model = backend->program().model;
  absl::StatusOr<data::TokenDataset> opened =
      data::TokenDataset::open(options.dataPath, options.dataOptions);
  if (!opened.ok())
    return opened.status();
  dataset.emplace(std::move(*opened));
  // Every id of the file, now: a bad one found only when a batch draws it
  // would stop the run at some later step.
  if (absl::Status s = checkVocabulary(*dataset); !s.ok())
    return s;
  // The sampler draws the global batch, exactly as a single-rank run of
  // the unpartitioned model would; this rank reads its block of rows.
  absl::StatusOr<data::BatchSampler> created2 = data::BatchSampler::create(
      *dataset, options.dataSeed, globalBatch(), model.seq, model.vocab);
  if (!created2.ok())
    return created2.status();
  sampler.emplace(std::move(*created2));
  tokens.resize(backend->tokensPerStep());
  targets.resize(backend->tokensPerStep());
  if (absl::Status s = setUpDocuments(); !s.ok())
    return s;
  if (absl::Status s = setUpEvaluation(); !s.ok())
    return s;
  lossGuard.emplace(options.lossLimits, model.vocab);

  if (reports && !options.metricsPath.empty()) {
    // A resumed run continues the metrics of the run it resumes.
    absl::StatusOr<io::MetricsWriter> writer = io::MetricsWriter::open(
        options.metricsPath, /*append=*/firstStep > 0);
    if (!writer.ok())
      return writer.status();
    metrics.emplace(std::move(*writer));
  }
  if (reports && !options.tensorboardDir.empty()) {
    // A new event file per run: TensorBoard joins a directory's files.
    absl::StatusOr<io::TensorBoardWriter> writer =
        io::TensorBoardWriter::open(options.tensorboardDir);
    if (!writer.ok())
      return writer.status();
    tensorboard.emplace(std::move(*writer));
  }
  return absl::OkStatus();
}

void Run::printHeader() const {
  const ModelInfo &model = backend->program().model;
  out << absl::StrFormat(
      "model %s: %s parameters (%s active), %d layers, %d experts top-%d\n",
      model.name.empty() ? "<unnamed>" : model.name,
      io::formatSiValue(model.totalParams),
      io::formatSiValue(model.activeParams), model.layers, model.experts,
      model.topK);
  int64_t ranks = backend->numRanks();
  int64_t batch = globalBatch();
  // Per-rank figures are labelled as such once there is more than one rank.
  std::string perRank = ranks > 1 ? " per rank" : "";
  if (ranks > 1)
    out << absl::StrFormat("mesh: %s (%d ranks)\n",
                           backend->program().meshDescription(), ranks);
  out << absl::StrFormat(
      "step: batch %d x seq %d = %d tokens, %s FLOP%s; memory%s %s B params, "
      "%s B optimizer, %s B arena\n",
      batch, model.seq, batch * model.seq,
      io::formatSiValue(model.flopsPerStep), perRank, perRank,
      io::formatSiValue(backend->totalParameterBytes()),
      io::formatSiValue(backend->optimizerStateBytes()),
      io::formatSiValue(backend->arenaBytes()));
  out << absl::StrFormat("cpu: %d kernel thread(s)\n", cpu::numThreads());
  out << absl::StrFormat("data: %s (%s, %s, %s tokens)\n", dataset->path(),
                         data::datasetFormatName(dataset->format()),
                         data::tokenDtypeName(dataset->dtype()),
                         io::formatSiValue(dataset->numTokens()));
  if (evalDataset)
    out << absl::StrFormat(
        "eval: %d batch(es) of %s (%s tokens), after %s\n", evalBatches,
        evalDataset->path(), io::formatSiValue(evalDataset->numTokens()),
        options.evalEvery > 0
            ? absl::StrCat("every ", options.evalEvery, " steps and the last")
            : std::string("the last step"));
}

void Run::printProfile(double totalSeconds) const {
  const OpcodeTimes &opcodeTime = backend->instructionTimes()
                                      ? *backend->instructionTimes()
                                      : this->opcodeTime;
  std::vector<int> order;
  for (int op = 0; op < kNumOpcodes; ++op)
    if (opcodeTime[op].second > 0)
      order.push_back(op);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return opcodeTime[a].first > opcodeTime[b].first;
  });
  out << (backend->instructionTimes()
              ? "time per kernel (all steps, on the device's compute stream):\n"
              : "time per kernel (all steps):\n");
  for (int op : order) {
    // A run too short for the clock to tick has no meaningful shares.
    double percent =
        totalSeconds > 0 ? 100.0 * opcodeTime[op].first / totalSeconds : 0.0;
    out << absl::StrFormat("  %-18s %9.3f s %6.1f%% %8d calls\n",
                           opcodeName(static_cast<Opcode>(op)),
                           opcodeTime[op].first, percent,
                           opcodeTime[op].second);
  }
}

absl::Status Run::fillBatch(const data::BatchSampler &from, int64_t step) {
  // Microbatch j is rows [j * b, (j + 1) * b) of the global batch, b =
  // globalBatch() / microbatches; this rank reads its block of each.
  BatchBlock rows = backend->batchBlock();
  int64_t localBatch = backend->program().model.batch;
  int64_t microbatchRows = localBatch * rows.count;
  int64_t localTokens = localBatch * backend->program().model.seq;
  for (int64_t j = 0; j < backend->microbatches(); ++j) {
    int64_t firstRow = j * microbatchRows + rows.index * localBatch;
    if (absl::Status s = from.fillRows(step, firstRow, localBatch,
                                       tokens.data() + j * localTokens,
                                       targets.data() + j * localTokens);
        !s.ok())
      return s;
    if (!positions.empty())
      from.markDocuments(
          step, firstRow, localBatch, eosToken, tokens.data() + j * localTokens,
          targets.data() + j * localTokens, positions.data() + j * localTokens);
  }
  return absl::OkStatus();
}

absl::Status Run::setUpEvaluation() {
  if (options.evalDataPath.empty())
    return absl::OkStatus();
  if (!backend->evaluates())
    return absl::InvalidArgumentError(absl::StrCat(
        "--eval-data: the ", std::string(backend->name()),
        " backend does not run evaluations yet (the cpu backend does)"));
  absl::StatusOr<data::TokenDataset> opened =
      data::TokenDataset::open(options.evalDataPath, options.dataOptions);
  if (!opened.ok())
    return opened.status();
  evalDataset.emplace(std::move(*opened));
  // Checked as --data is: a bad id is found now, wherever it lies, not
  // when (or if) an evaluation batch draws it.
  if (absl::Status s = checkVocabulary(*evalDataset, "--eval-data"); !s.ok())
    return s;
  if (!positions.empty() && !eosToken &&
      evalDataset->format() != data::DatasetFormat::Megatron)
    return absl::InvalidArgumentError(absl::StrCat(
        "--eval-data ", options.evalDataPath,
        ": the artifact masks documents, but the model has no eos_token_id "
        "to find them in a flat token stream (use a Megatron dataset)"));
  // Fixed batches: the same draws at every evaluation, from a seed of
  // their own, whatever the run's data seed.
  constexpr uint64_t kEvalSeed = 0x6576616c; // "eval"
  const ModelInfo &model = backend->program().model;
  absl::StatusOr<data::BatchSampler> created = data::BatchSampler::create(
      *evalDataset, kEvalSeed, globalBatch(), model.seq, model.vocab);
  if (!created.ok())
    return absl::Status(created.status().code(),
                        absl::StrCat("--eval-data ", options.evalDataPath, ": ",
                                     created.status().message()));
  evalSampler.emplace(std::move(*created));
  // Batches beyond those the file holds would repeat windows: they add
  // time and no information (nor does a count no run could finish).
  int64_t rows = globalBatch();
  int64_t held = (evalSampler->numStarts() + rows - 1) / rows;
  constexpr int64_t kDefaultEvalBatches = 4;
  evalBatches = options.evalBatches > 0
                    ? options.evalBatches
                    : std::min(kDefaultEvalBatches, held);
  if (evalBatches > held)
    return absl::InvalidArgumentError(absl::StrCat(
        "--eval-batches ", evalBatches, " is more than --eval-data ",
        options.evalDataPath, " holds: its ", evalSampler->numStarts(),
        " distinct windows of ", model.seq + 1, " tokens fill at most ", held,
        " batch(es) of ", rows, " rows"));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<double>> Run::evaluateAfter(int64_t step) {
  if (!evalSampler)
    return std::nullopt;
  if (!everyNth(step, options.evalEvery) && !isLastStep(step))
    return std::nullopt;
  double sum = 0;
  for (int64_t batch = 0; batch < evalBatches; ++batch) {
    if (absl::Status s = fillBatch(*evalSampler, batch); !s.ok())
      return atStep(
          step,
          absl::Status(s.code(), absl::StrCat("evaluation batch ", batch + 1,
                                              ": ", s.message())));
    absl::StatusOr<float> loss =
        backend->evaluate(tokens.data(), targets.data(), step,
                          positions.empty() ? nullptr : positions.data());
    if (!loss.ok())
      return loss.status();
    sum += *loss;
  }
  return sum / evalBatches;
}

absl::Status Run::runOne(int64_t step, TrainSummary &summary) {
  if (absl::Status s = fillBatch(*sampler, step); !s.ok())
    return atStep(step, s);

  // The loss parts read two scalars mid-step: free on the host, a wait for
  // the stream on a device, which pays it only for a dump.
  bool dumpThis = !options.dumpStepDir.empty() &&
                  step == options.dumpStepAt.value_or(firstStep);
  std::optional<LossPartsProbe> probe;
  if (backend->hostStep() || dumpThis)
    probe.emplace(StepState(*backend));
  std::optional<ExpertLoadProbe> loads;
  if (backend->hostStep() || dumpThis) {
    loads.emplace(StepState(*backend));
    if (loads->empty())
      loads.reset();
  }
  std::optional<StepDump> dump;
  if (dumpThis) {
    absl::StatusOr<StepDump> begun =
        StepDump::begin(options.dumpStepDir, StepState(*backend), step,
                        tokens.data(), targets.data());
    if (!begun.ok())
      return begun.status();
    dump.emplace(std::move(*begun));
  }
  StepHooks hooks;
  std::chrono::steady_clock::time_point kernelStart;
  // A backend that times its instructions itself needs no host timing.
  bool hostTimed = options.profile && !backend->instructionTimes();
  hooks.afterInstruction = [&](size_t, const Instruction &inst) {
    if (hostTimed) {
      auto &slot = opcodeTime[static_cast<int>(inst.opcode)];
      slot.first += std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - kernelStart)
                        .count();
      ++slot.second;
    }
  };
  hooks.beforeInstruction = [&](size_t index, const Instruction &inst) {
    if (probe)
      probe->before(index);
    if (loads)
      loads->before(index);
    if (dump)
      dump->before(index, inst);
    if (hostTimed)
      kernelStart = std::chrono::steady_clock::now();
  };

  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<StepResult> result = runStep(step, hooks);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  if (!result.ok())
    return result.status();
  std::string warning;
  if (absl::Status s = lossGuard->check(step, result->loss, &warning);
      !s.ok())
    return s;
  if (!warning.empty() && reports)
    out << "warning: " << warning << "\n";
  summary.seconds += seconds;
  summary.losses.push_back(result->loss);
  if (dump)
    if (absl::Status s = dump->finish(result->loss, result->gradNorm,
                                      result->lr, probe->parts());
        !s.ok())
      return s;

  const ModelInfo &model = backend->program().model;
  io::MetricsRecord record;
  record.step = stepNumber(step);
  record.loss = result->loss;
  record.gradNorm = result->gradNorm;
  record.lr = result->lr;
  record.tokensPerS = globalTokensPerStep() / seconds;
  record.flopsPerS = model.flopsPerStep / seconds;
  record.elapsedS = summary.seconds;
  LossParts parts = probe ? probe->parts() : LossParts{};
  if (backend->program().pipeline.stages > 1) {
    // Only the last stage computes the loss; rank 0 reports it.
    double shared[7] = {parts.ce,
                        parts.aux,
                        parts.sequenceAux,
                        parts.zLoss,
                        parts.known ? 1.0 : 0.0,
                        parts.hasSequenceAux ? 1.0 : 0.0,
                        parts.hasZLoss ? 1.0 : 0.0};
    if (!parts.known)
      std::fill(shared, shared + 4, 0.0);
    if (absl::Status s = backend->sumOverStages(shared); !s.ok())
      return atStep(step, s);
    parts.ce = static_cast<float>(shared[0]);
    parts.aux = static_cast<float>(shared[1]);
    parts.sequenceAux = static_cast<float>(shared[2]);
    parts.zLoss = static_cast<float>(shared[3]);
    parts.known = shared[4] > 0;
    parts.hasSequenceAux = shared[5] > 0;
    parts.hasZLoss = shared[6] > 0;
  }
  if (parts.known) {
    record.extra.emplace_back("ce_loss", parts.ce);
    record.extra.emplace_back("aux_loss", parts.aux);
    if (parts.hasSequenceAux)
      record.extra.emplace_back("seq_aux_loss", parts.sequenceAux);
    if (parts.hasZLoss)
      record.extra.emplace_back("z_loss", parts.zLoss);
  }
  if (loads) {
    // Each pipeline rank read its own stages' routers.
    if (backend->program().pipeline.stages > 1)
      if (absl::Status s =
              backend->sumOverStages(absl::MakeSpan(loads->values()));
          !s.ok())
        return atStep(step, s);
    // Per layer in the file; the least balanced layer on the line.
    double worstCv = -1.0;
    for (auto &[name, value] : loads->metrics()) {
      record.detail.emplace_back(name, value);
      if (absl::StartsWith(name, "load_cv."))
        worstCv = std::max(worstCv, value);
    }
    if (worstCv >= 0.0)
      record.extra.emplace_back("load_cv_max", worstCv);
  }
  absl::StatusOr<std::optional<double>> evalLoss = evaluateAfter(step);
  if (!evalLoss.ok())
    return evalLoss.status();
  if (*evalLoss)
    record.extra.emplace_back("eval_loss", **evalLoss);
  if (std::optional<Backend::DeviceMemory> device = backend->deviceMemory()) {
    record.extra.emplace_back("device_allocated_mib",
                              device->allocated / 1048576.0);
    record.extra.emplace_back("device_scratch_peak_mib",
                              device->scratchPeak / 1048576.0);
  }
  if (metrics)
    if (absl::Status s = metrics->write(record); !s.ok())
      return s;
  if (tensorboard)
    if (absl::Status s = tensorboard->write(
            record, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
        !s.ok())
      return s;
  int64_t done = step - firstStep + 1;
  bool logged = done % std::max<int64_t>(options.logEvery, 1) == 0 ||
                done == options.steps;
  if (!quiet && logged)
    out << io::formatProgressLine(record, firstStep + options.steps) << "\n";
  if (reports && !options.plotPath.empty()) {
    double x = static_cast<double>(record.step);
    lossCurve.points.emplace_back(x, record.loss.value_or(NAN));
    throughputCurve.points.emplace_back(x, record.tokensPerS.value_or(NAN));
    for (const auto &[key, value] : record.extra)
      if (key == "eval_loss")
        evalCurve.points.emplace_back(x, value);
    if (logged)
      if (absl::Status s = writePlot(); !s.ok())
        return s;
  }
  return absl::OkStatus();
}

absl::Status Run::writePlot() {
  io::PlotPanel losses{"loss by step", {lossCurve}};
  if (!evalCurve.points.empty())
    losses.series.push_back(evalCurve);
  io::PlotPanel throughput{"throughput by step", {throughputCurve}};
  return io::writePlotPng(options.plotPath, {losses, throughput});
}

absl::StatusOr<TrainSummary> Run::loop() {
  if (!quiet)
    printHeader();
  TrainSummary summary;
  summary.plannedBytes = plannedBytes;
  for (int64_t step = firstStep; step < firstStep + options.steps; ++step) {
    if (absl::Status s = runOne(step, summary); !s.ok())
      return s;
    if (absl::Status s = checkpointAfter(step); !s.ok())
      return s;
  }
  if (!options.savePath.empty()) {
    if (absl::Status s = backend->pullWeights(); !s.ok())
      return s;
    if (absl::Status s = saveHfCheckpoint(backend->weights(), options.savePath,
                                          options.saveDType);
        !s.ok())
      return s;
  }
  if (metrics)
    if (absl::Status s = metrics->close(); !s.ok())
      return s;
  if (tensorboard)
    if (absl::Status s = tensorboard->close(); !s.ok())
      return s;
  if (trace)
    if (absl::Status s = trace->write(tracePathOfRank()); !s.ok())
      return s;
  if (options.profile && reports)
    printProfile(summary.seconds);
  uint64_t peak = io::peakResidentBytes();
  if (peak > residentAtStart && residentAtStart > 0)
    summary.measuredBytes = peak - residentAtStart;
  if (!quiet && !summary.losses.empty()) {
    double first = summary.losses.front(), last = summary.losses.back();
    if (options.plot && summary.losses.size() > 1)
      out << plotLossCurve(summary.losses, 60, 10, stepNumber(firstStep));
    // A relative change from a zero loss is meaningless; leave it out.
    std::string change =
        first != 0
            ? absl::StrFormat(" (%+.1f%%)", 100.0 * (last - first) / first)
            : "";
    out << absl::StrFormat(
        "loss %.4f -> %.4f%s over %d steps in %.2f s (%s tokens/s)\n", first,
        last, change, summary.losses.size(), summary.seconds,
        io::formatSiValue(globalTokensPerStep() * summary.losses.size() /
                          summary.seconds));
    if (summary.measuredBytes > 0)
      out << absl::StrFormat(
          "memory per rank: %.2f MiB planned, %.2f MiB measured (resident "
          "growth to the peak)\n",
          summary.plannedBytes / 1048576.0, summary.measuredBytes / 1048576.0);
    if (std::optional<Backend::DeviceMemory> device = backend->deviceMemory())
      out << absl::StrFormat(
          "device memory per rank: %.2f MiB allocated, %.2f MiB peak scratch "
          "(the plan's kernel workspace)\n",
          device->allocated / 1048576.0, device->scratchPeak / 1048576.0);
  }
  return summary;
}

namespace {
/// The payload onEveryRank attaches.
constexpr absl::string_view kOnEveryRank = "moe/error-on-every-rank";
} // namespace

absl::Status onEveryRank(absl::Status status) {
  status.SetPayload(kOnEveryRank, absl::Cord("1"));
  return status;
}

bool isOnEveryRank(const absl::Status &status) {
  return status.GetPayload(kOnEveryRank).has_value();
}

absl::StatusOr<TrainSummary> train(const TrainOptions &options,
                                   std::ostream &out) {
  if (options.steps < 0 || options.startStep < 0)
    return absl::InvalidArgumentError("steps and start step must be >= 0");
  if (absl::Status s = validateLossLimits(options.lossLimits); !s.ok())
    return s;
  Run run(options, out);
  if (absl::Status s = run.setUp(); !s.ok())
    return s;
  return run.loop();
}

std::string plotLossCurve(const std::vector<double> &losses, int width,
                          int height, int64_t firstStepNumber) {
  if (losses.empty() || width < 2 || height < 2)
    return "";
  // Average the steps falling into each column. Non-finite losses are left
  // out: one NaN or infinity would otherwise make the whole scale useless.
  // A column with no finite loss stays empty.
  int columns = std::min<int>(width, losses.size());
  std::vector<double> values(columns, 0.0);
  std::vector<int> counts(columns, 0);
  for (size_t i = 0; i < losses.size(); ++i) {
    if (!std::isfinite(losses[i]))
      continue;
    int c = static_cast<int>(i * columns / losses.size());
    values[c] += losses[i];
    ++counts[c];
  }
  double lo = INFINITY, hi = -INFINITY;
  for (int c = 0; c < columns; ++c) {
    if (counts[c] == 0)
      continue;
    values[c] /= counts[c];
    lo = std::min(lo, values[c]);
    hi = std::max(hi, values[c]);
  }
  if (lo > hi)
    return "";
  if (hi - lo < 1e-12)
    hi = lo + 1e-12;
  std::vector<std::string> rows(height, std::string(columns, ' '));
  for (int c = 0; c < columns; ++c) {
    if (counts[c] == 0)
      continue;
    int r = static_cast<int>(std::lround((hi - values[c]) / (hi - lo) *
                                         (height - 1)));
    rows[r][c] = '*';
  }
  std::string chart = absl::StrFormat("loss curve (%d steps)\n", losses.size());
  for (int r = 0; r < height; ++r) {
    std::string label =
        r == 0 ? absl::StrFormat("%8.3f", hi)
               : r == height - 1 ? absl::StrFormat("%8.3f", lo)
                                 : std::string(8, ' ');
    absl::StrAppend(&chart, label, " |", rows[r], "\n");
  }
  absl::StrAppend(&chart, std::string(9, ' '), "+", std::string(columns, '-'),
                  "\n");
  std::string first = absl::StrFormat("%d", firstStepNumber);
  std::string last =
      absl::StrFormat("%d", firstStepNumber + losses.size() - 1);
  absl::StrAppend(&chart, std::string(10, ' '), first,
                  std::string(std::max<int>(1, columns - first.size() -
                                                   last.size()),
                              ' '),
                  last, "\n");
  return chart;
}

} // namespace moe::rt::train
