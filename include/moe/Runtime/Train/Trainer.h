//===- Trainer.h - the training loop of moe-run -----------------*- C++ -*-===//
//
// Loads a verified artifact, initialises or loads the weights, samples
// batches from a token dataset, runs the compiled step, and reports every
// step (progress line, JSONL metrics) and the loss curve at the end.
//
// A partitioned artifact runs on every rank of a comm::World: each rank
// samples its rows of the global batch, and rank 0 alone reports (the loss,
// gradient norm and learning rate are the same on every rank).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_TRAINER_H
#define MOE_RUNTIME_TRAIN_TRAINER_H

#include "moe/Runtime/Data/TokenDataset.h"
#include "moe/Runtime/Train/LossGuard.h"
#include "moe/Runtime/Train/Weights.h"

#include "absl/status/status.h"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace moe::rt::comm {
class World;
} // namespace moe::rt::comm

namespace moe::rt::train {

struct TrainOptions {
  std::string artifactPath;
  std::string dataPath;
  data::DatasetOptions dataOptions;
  /// Steps to run, starting at `startStep` (0-based: the steps already
  /// done, so the first step run is step startStep + 1 in the messages and
  /// the metrics; sets the LR schedule position and the batches drawn).
  int64_t steps = 0;
  int64_t startStep = 0;
  /// Parameter initialisation seed; the artifact's when absent.
  std::optional<uint64_t> initSeed;
  /// Seed of the batch sampler.
  uint64_t dataSeed = 0;
  /// Safetensors to start from / to write at the end (HF names).
  std::string loadPath, savePath;
  /// The dtype --save writes (--save-dtype).
  SaveDType saveDType = SaveDType::F32;
  /// JSONL file with one record per step, its "step" numbered from 1 like
  /// the progress lines; appended to when resuming (startStep > 0),
  /// truncated otherwise.
  std::string metricsPath;
  /// TensorBoard event files of the same metrics go to this directory
  /// (moe-run --tensorboard; empty: none).
  std::string tensorboardDir;
  /// --eval-data: a held-out token file (read with dataOptions) whose
  /// cross-entropy (engine::evaluatedLoss) is computed without changing anything (Backend::evaluate) after
  /// every `evalEvery` steps and the last, over `evalBatches` fixed batches
  /// of it, and reported as eval_loss; none when empty. The batches may
  /// not outnumber those the file holds; 0: 4, or
  /// fewer if the file holds fewer.
  std::string evalDataPath;
  int64_t evalEvery = 0;
  int64_t evalBatches = 0;
  /// --checkpoint-keep: how many of the newest checkpoints under
  /// checkpointDir stay (0: all).
  int64_t checkpointKeep = 0;
  /// --checkpoint-async: write checkpoints on a background thread
  /// (AsyncCheckpoint.h).
  bool checkpointAsync = false;
  /// The loss (and eval loss) and throughput curves of this run, redrawn
  /// to this PNG with each progress line (moe-run --plot; empty: none).
  std::string plotPath;
  /// Directory receiving a full record of one step (inputs, parameters
  /// before and after, gradients, metrics) for test/reference/.
  std::string dumpStepDir;
  /// The step to dump (0-based, like startStep); the first step run when
  /// absent.
  std::optional<int64_t> dumpStepAt;
  /// Print a progress line every `logEvery` steps (and the last one).
  int64_t logEvery = 1;
  /// GEMM threads; OpenBLAS's default (OPENBLAS_NUM_THREADS or the
  /// cores) when absent.
  std::optional<int> threads;
  /// Print the time spent per kernel (opcode) at the end.
  bool profile = false;
  /// Chrome trace of the steps, one file per rank (io::Trace); none when
  /// empty.
  std::string tracePath;
  /// Chunks the tokens of expert-parallel layers are split into, so that
  /// one chunk's all-to-all overlaps another's expert compute (1: none;
  /// bench/overlap.sh measures whether more pays on a given machine).
  int64_t expertChunks = 1;
  /// Gradient reductions and FSDP all-gathers on a communication thread.
  bool asyncCollectives = false;
  /// The loss checks beyond finiteness (LossGuard.h): a ceiling and a
  /// spike detector. A spike in warn mode prints a "warning: " line, even
  /// when quiet.
  LossLimits lossLimits;
  bool quiet = false;
  bool plot = true;
  /// Distributed checkpoints (Checkpoint.h) under this directory, every
  /// `checkpointEvery` steps (0: only after the last step); none if empty.
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  /// A checkpoint (or a directory of them: the newest) to continue from:
  /// its weights, optimizer state and step. `startStep` is then its step.
  std::string resumePath;
  /// The backend the steps run on, by name (createBackend): "cpu" or
  /// "cuda" (a GPU per process, the CUDA backend module; not for step
  /// dumps, profiles or traces yet).
  std::string device = "cpu";
  /// With device "cuda": the virtual GPU to run on (--virtual-gpu NAME), or
  /// empty for a real one.
  std::string virtualGpu;
  /// The job's processes, for an artifact partitioned over several ranks
  /// (its rank count must equal the world's size); none for one rank.
  comm::World *world = nullptr;
};

/// A requested feature that reads or writes whole tensors by name (weights
/// files, step dumps), which a rank of a partitioned run holds only blocks
/// of, so it needs a single rank for now.
struct WholeTensorFeature {
  const char *flag; // "--save"
  const char *what; // "saving weights"
};

/// The first such feature `options` asks for, if any.
std::optional<WholeTensorFeature>
requestedWholeTensorFeature(const TrainOptions &options);

/// What a finished run reports.
struct TrainSummary {
  std::vector<double> losses;
  double seconds = 0;
  /// The memory the compiled step needs on this rank (Executor::
  /// bytesPerRank), and how much the process's resident memory grew from
  /// just before allocating it to its peak (0 when the system cannot say).
  uint64_t plannedBytes = 0, measuredBytes = 0;
};

/// `status` marked as an error that every rank of the job returns at the
/// same point, after agreeing on it (the dataset's vocabulary check): no
/// peer is left waiting, so the ranks end normally, each printing its
/// report, instead of one aborting the others (possibly before they print).
absl::Status onEveryRank(absl::Status status);
bool isOnEveryRank(const absl::Status &status);

/// The CPU kernels' threads: `threads`, or OpenBLAS's default
/// (OPENBLAS_NUM_THREADS or the cores), refused when that variable is
/// malformed.
absl::Status useKernelThreads(std::optional<int> threads);

/// Runs the training loop; progress goes to `out`. Errors name the file,
/// the step or the instruction concerned.
absl::StatusOr<TrainSummary> train(const TrainOptions &options,
                                   std::ostream &out);

/// A text chart of a loss curve, `height` rows by at most `width` columns
/// (steps are averaged per column), its axis labelled with the step numbers
/// of the first and the last loss (`firstStepNumber` and on). Non-finite
/// losses are left out; with no finite loss at all the chart is empty ("").
std::string plotLossCurve(const std::vector<double> &losses, int width = 60,
                          int height = 10, int64_t firstStepNumber = 1);

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_TRAINER_H
