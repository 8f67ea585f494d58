//===- SbatchScript.h - a Slurm batch script for an artifact ----*- C++ -*-===//
//
// `moec --emit-sbatch FILE` writes, beside the artifact, the batch script
// that runs it: one task per rank of the compiled mesh, placed on nodes of
// `gpusPerNode` GPUs (one GPU per task) or, for the CPU backend, of
// `tasksPerNode` tasks; srun starts the ranks (PMIx), and moe-run takes its
// rank from the launcher. A user edits the partition, account and time and
// submits it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_SBATCHSCRIPT_H
#define MOE_TARGET_SBATCHSCRIPT_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace mlir::moe {

struct SbatchOptions {
  std::string modelName;
  /// "dp=2 x tp=2" and the ranks it has.
  std::string meshDescription;
  int64_t ranks = 1;
  /// GPUs per node (one rank each); 0: a CPU job.
  int64_t gpusPerNode = 0;
  /// A CPU job's tasks per node (0: all ranks on one node).
  int64_t tasksPerNode = 0;
  std::string partition; // none: the cluster's default
  std::string time = "01:00:00";
  /// Absolute paths of the artifact and of moe-run.
  std::string artifactPath, moeRunPath;
};

/// The script's text, or an error message (a leading "error: ") for
/// options that cannot place the ranks.
std::string sbatchScript(const SbatchOptions &options);

} // namespace mlir::moe

#endif // MOE_TARGET_SBATCHSCRIPT_H
