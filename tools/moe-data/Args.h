//===- Args.h - a small command-line parser for moe-data --------*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_DATA_ARGS_H
#define MOE_TOOLS_MOE_DATA_ARGS_H

#include "absl/status/statusor.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace moe::tools {

struct Args {
  std::map<std::string, std::string> options; ///< "--out" -> "x.bin"
  /// List options: "--in" -> {"a.txt", "b.txt"}.
  std::map<std::string, std::vector<std::string>> lists;
  std::vector<std::string> positional;

  /// The value of `name`, or `fallback` if it was not given.
  std::string get(const std::string &name, const std::string &fallback) const;
  bool has(const std::string &name) const { return options.count(name) != 0; }
};

/// Parses "--name value", "--name=value" and positional arguments. Every
/// option must be in `known` and given at most once; "--" ends the options.
/// A flag in `flags` takes no value (its value is "1"); an option in `lists`
/// takes the arguments up to the next option. Errors are usage errors,
/// worded for the user.
absl::StatusOr<Args> parseArgs(const std::vector<std::string> &argv,
                               const std::set<std::string> &known,
                               const std::set<std::string> &flags = {},
                               const std::set<std::string> &lists = {});

} // namespace moe::tools

#endif // MOE_TOOLS_MOE_DATA_ARGS_H
