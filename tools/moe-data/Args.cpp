//===- Args.cpp - a small command-line parser for moe-data ----------------===//
#include "Args.h"

#include "absl/strings/str_cat.h"

namespace moe::tools {

std::string Args::get(const std::string &name,
                      const std::string &fallback) const {
  auto it = options.find(name);
  return it == options.end() ? fallback : it->second;
}

absl::StatusOr<Args> parseArgs(const std::vector<std::string> &argv,
                               const std::set<std::string> &known,
                               const std::set<std::string> &flags,
                               const std::set<std::string> &lists) {
  Args args;
  bool optionsEnded = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string &arg = argv[i];
    if (optionsEnded || arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      args.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      optionsEnded = true;
      continue;
    }
    std::string name = arg;
    std::string value;
    if (flags.count(name)) {
      if (!args.options.emplace(name, "1").second)
        return absl::InvalidArgumentError(
            absl::StrCat("option '", name, "' is given twice"));
      continue;
    }
    if (lists.count(name)) {
      if (args.lists.count(name))
        return absl::InvalidArgumentError(
            absl::StrCat("option '", name, "' is given twice"));
      std::vector<std::string> &values = args.lists[name];
      while (i + 1 < argv.size() && argv[i + 1].compare(0, 2, "--") != 0)
        values.push_back(argv[++i]);
      if (values.empty())
        return absl::InvalidArgumentError(
            absl::StrCat("option '", name, "' needs a value"));
      args.options.emplace(name, values.front());
      continue;
    }
    size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    } else {
      if (!known.count(name))
        return absl::InvalidArgumentError(
            absl::StrCat("unknown option '", name, "'"));
      if (i + 1 >= argv.size())
        return absl::InvalidArgumentError(
            absl::StrCat("option '", name, "' needs a value"));
      value = argv[++i];
    }
    if (!known.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", name, "'"));
    if (!args.options.emplace(name, value).second)
      return absl::InvalidArgumentError(
          absl::StrCat("option '", name, "' is given twice"));
  }
  return args;
}

} // namespace moe::tools
