//===- SameFile.h - refuse an output that is one of the inputs --*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_DATA_SAMEFILE_H
#define MOE_TOOLS_MOE_DATA_SAMEFILE_H

#include "absl/status/status.h"

#include <string>
#include <utility>
#include <vector>

namespace moe::tools {

/// A file a command names, with the option that names it ("--in").
struct NamedPath {
  std::string option;
  std::string path;
};

/// An error if one of `outputs` is the same file (device and inode, so
/// whatever the spelling, link or symlink) as one of `inputs`: writing it
/// would destroy the input. Paths that do not exist yet are no input.
absl::Status refuseOutputOverInput(const std::vector<NamedPath> &outputs,
                                   const std::vector<NamedPath> &inputs);

} // namespace moe::tools

#endif // MOE_TOOLS_MOE_DATA_SAMEFILE_H
