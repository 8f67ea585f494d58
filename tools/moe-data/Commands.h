//===- Commands.h - the subcommands of moe-data -----------------*- C++ -*-===//
//
// Each subcommand takes its already-validated options and returns an error
// for moe-data's main to print (exit code 1); usage errors never get here.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOE_DATA_COMMANDS_H
#define MOE_TOOLS_MOE_DATA_COMMANDS_H

#include "moe/Runtime/Data/TokenDataset.h"

#include "absl/status/status.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace moe::tools {

/// Where and how a corpus is written.
struct OutputOptions {
  std::string path;
  rt::data::DatasetFormat format = rt::data::DatasetFormat::Flat;
  rt::data::TokenDtype dtype = rt::data::TokenDtype::UInt16;
};

struct SynthOptions {
  OutputOptions output;
  int64_t tokens = 200000;
  uint64_t seed = 0;
};

struct TokenizeOptions {
  std::string input;
  OutputOptions output;
};

struct InfoOptions {
  std::string path;
  rt::data::DatasetFormat format = rt::data::DatasetFormat::Auto;
  rt::data::TokenDtype dtype = rt::data::TokenDtype::UInt16;
};

/// Writes byte-level documents (one Megatron document each, or one flat
/// stream) and reports what was written to `out`.
absl::Status writeByteCorpus(const std::vector<std::string> &documents,
                             const OutputOptions &options, std::ostream &out);

absl::Status runSynth(const SynthOptions &options, std::ostream &out);
absl::Status runTokenize(const TokenizeOptions &options, std::ostream &out);
absl::Status runInfo(const InfoOptions &options, std::ostream &out);

} // namespace moe::tools

#endif // MOE_TOOLS_MOE_DATA_COMMANDS_H
