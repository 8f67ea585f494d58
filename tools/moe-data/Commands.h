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
  std::vector<std::string> inputs;
  OutputOptions output;
  /// A tokenizer.json or SentencePiece .model; empty for byte tokens.
  std::string tokenizer;
  /// The field of each .jsonl line that holds its document.
  std::string jsonKey = "text";
  bool appendEos = false;
  int threads = 1;
  /// Show progress on stderr: forced, or left to the terminal and the size.
  bool forceProgress = false;
};

struct DetokenizeOptions {
  std::string input;
  std::string output;
  std::string tokenizer;
  rt::data::DatasetFormat format = rt::data::DatasetFormat::Auto;
  rt::data::TokenDtype dtype = rt::data::TokenDtype::UInt16;
  bool keepSpecialTokens = false;
};

struct InfoOptions {
  std::string path;
  rt::data::DatasetFormat format = rt::data::DatasetFormat::Auto;
  rt::data::TokenDtype dtype = rt::data::TokenDtype::UInt16;
};

/// Writes tokenized documents (one Megatron document each, or one flat
/// stream) and reports what was written to `out`.
absl::Status writeTokenDocuments(const std::vector<std::vector<int64_t>> &ids,
                                 const OutputOptions &options,
                                 std::ostream &out);

/// Writes byte-level documents (one Megatron document each, or one flat
/// stream) and reports what was written to `out`.
absl::Status writeByteCorpus(const std::vector<std::string> &documents,
                             const OutputOptions &options, std::ostream &out);

absl::Status runSynth(const SynthOptions &options, std::ostream &out);
absl::Status runTokenize(const TokenizeOptions &options, std::ostream &out);
absl::Status runDetokenize(const DetokenizeOptions &options, std::ostream &out);
absl::Status runInfo(const InfoOptions &options, std::ostream &out);

} // namespace moe::tools

#endif // MOE_TOOLS_MOE_DATA_COMMANDS_H
