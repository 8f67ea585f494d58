//===- SamePath.h - refusing an output that is an input ---------*- C++ -*-===//
//
// A tool that writes where it reads destroys its input: `moe-run generate
// --load w --out w/model.safetensors` replaced the trained weights with a
// few token ids. Paths are compared as the file system sees them (device
// and inode, symlinks followed), not as strings, so `./w`, `w/../w` and a
// symlink to `w` are all `w`.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_SAMEPATH_H
#define MOE_RUNTIME_IO_SAMEPATH_H

#include "absl/status/status.h"
#include "absl/types/span.h"

#include <string>

namespace moe::rt::io {

/// Whether `a` and `b` both exist and are the same file or directory.
bool isSameFile(const std::string &a, const std::string &b);

/// Whether `path` (which need not exist) is the directory `dir` or lies
/// below it: some existing ancestor of `path`, symlinks resolved, is `dir`.
bool isInsideDirectory(const std::string &path, const std::string &dir);

/// A path on a command line and the flag that gave it ("--load"; "the
/// artifact" for a positional argument).
struct FlagPath {
  std::string flag;
  std::string path;
};

/// An output of a command.
struct OutputPath {
  FlagPath named;
  /// A directory the command writes files into (--checkpoint-dir), rather
  /// than one file.
  bool directory = false;
};

/// Fails, naming both flags and paths, if an output would write over an
/// input: it is the input, or lies inside an input directory, or (an
/// output directory) holds an input. Inputs and outputs that do not exist
/// yet conflict only by lying inside an existing one; empty paths are
/// skipped.
absl::Status checkOutputsAreNotInputs(absl::Span<const FlagPath> inputs,
                                      absl::Span<const OutputPath> outputs);

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_SAMEPATH_H
