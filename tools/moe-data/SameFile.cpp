//===- SameFile.cpp - refuse an output that is one of the inputs ----------===//
#include "SameFile.h"

#include "absl/strings/str_cat.h"

#include <sys/stat.h>

namespace moe::tools {

absl::Status refuseOutputOverInput(const std::vector<NamedPath> &outputs,
                                   const std::vector<NamedPath> &inputs) {
  for (const NamedPath &output : outputs) {
    struct stat out;
    if (::stat(output.path.c_str(), &out) != 0)
      continue;
    for (const NamedPath &input : inputs) {
      struct stat in;
      if (::stat(input.path.c_str(), &in) == 0 && in.st_dev == out.st_dev &&
          in.st_ino == out.st_ino)
        return absl::InvalidArgumentError(absl::StrCat(
            output.option, " '", output.path, "' is the same file as ",
            input.option, " '", input.path,
            "'; writing it would destroy the input"));
    }
  }
  return absl::OkStatus();
}

} // namespace moe::tools
