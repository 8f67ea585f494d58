//===- Flags.h - values of moe-run's command-line options -------*- C++ -*-===//
//
// The parsers moe-run's training and generate command lines share. Each
// throws UsageError (exit code 2) naming the flag and the value.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOE_RUN_FLAGS_H
#define MOE_TOOLS_MOE_RUN_FLAGS_H

#include "moe/Runtime/Data/TokenDataset.h"
#include "moe/Runtime/IO/SamePath.h"

#include <charconv>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace moe::tools {

/// A command-line error: bad usage, exit code 2.
struct UsageError {
  std::string message;
};

/// Refuses an option given twice: which of the two values wins would be a
/// guess (a script that appends an override should replace the value).
class OptionsSeen {
public:
  void note(const std::string &option) {
    if (!seen.insert(option).second)
      throw UsageError{option + " is given more than once"};
  }

private:
  std::set<std::string> seen;
};

/// Refuses an option as the value of option `flag`: the value was left
/// out (`--out --seed 1`), and the next option would be swallowed.
inline void refuseOptionAsValue(const std::string &flag,
                                const std::string &value) {
  if (value.compare(0, 2, "--") == 0)
    throw UsageError{flag + " needs a value, not the option '" + value + "'"};
}

/// The whole of `text` as a T; `kind` ("an integer") for the error.
template <typename T>
T parseAs(const std::string &flag, const std::string &text, const char *kind) {
  T value = 0;
  auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    throw UsageError{flag + " expects " + kind + ", got '" + text + "'"};
  return value;
}

inline int64_t parseInt(const std::string &flag, const std::string &text) {
  return parseAs<int64_t>(flag, text, "an integer");
}

/// A real number; "inf" is one.
inline double parseNumber(const std::string &flag, const std::string &text) {
  return parseAs<double>(flag, text, "a number");
}

/// A seed: an integer >= 0.
inline uint64_t parseSeed(const std::string &flag, const std::string &text) {
  int64_t value = parseInt(flag, text);
  if (value < 0)
    throw UsageError{flag + " must be >= 0, got " + text};
  return static_cast<uint64_t>(value);
}

/// --threads: GEMM threads in [1, 1024].
inline int parseThreads(const std::string &flag, const std::string &text) {
  int64_t threads = parseInt(flag, text);
  if (threads <= 0 || threads > 1024)
    throw UsageError{flag + " must be in [1, 1024]"};
  return static_cast<int>(threads);
}

/// --data-format and --data-dtype.
inline rt::data::DatasetFormat parseDataFormat(const std::string &name) {
  std::optional<rt::data::DatasetFormat> format =
      rt::data::parseDatasetFormat(name);
  if (!format)
    throw UsageError{"unknown data format '" + name + "'"};
  return *format;
}
inline rt::data::TokenDtype parseDataDtype(const std::string &name) {
  std::optional<rt::data::TokenDtype> dtype = rt::data::parseTokenDtype(name);
  if (!dtype)
    throw UsageError{"unknown token dtype '" + name + "'"};
  return *dtype;
}

/// Adds the files token-data flag `flag` reads to `inputs`: `path`, and a
/// Megatron dataset's .bin and .idx (found as TokenDataset::open finds
/// them).
inline void addDataInputs(std::vector<rt::io::FlagPath> &inputs,
                          const std::string &flag, const std::string &path,
                          const rt::data::DatasetOptions &options) {
  if (path.empty())
    return;
  inputs.push_back({flag, path});
  std::optional<rt::data::MegatronPaths> megatron;
  if (options.format == rt::data::DatasetFormat::Megatron)
    megatron = rt::data::megatronPathsFor(path);
  else if (options.format == rt::data::DatasetFormat::Auto)
    megatron = rt::data::detectMegatron(path);
  if (megatron) {
    inputs.push_back({flag, megatron->bin});
    inputs.push_back({flag, megatron->idx});
  }
}

/// Refuses, as bad usage, an output that would write over an input
/// (io::checkOutputsAreNotInputs).
inline void checkOutputsAreNotInputs(
    const std::vector<rt::io::FlagPath> &inputs,
    const std::vector<rt::io::OutputPath> &outputs) {
  if (absl::Status status = rt::io::checkOutputsAreNotInputs(inputs, outputs);
      !status.ok())
    throw UsageError{std::string(status.message())};
}

} // namespace moe::tools

#endif // MOE_TOOLS_MOE_RUN_FLAGS_H
