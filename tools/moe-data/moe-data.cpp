//===- moe-data.cpp - make and inspect token datasets ---------------------===//
//
//   moe-data synth --out PATH [--tokens N] [--seed S] [--format F] [--dtype D]
//   moe-data tokenize --in FILES... --out PATH [--tokenizer T] [--format F]
//                     [--dtype D] [--json-key K] [--append-eos] [--threads N]
//                     [--progress]
//   moe-data detokenize --tokenizer T IN --out FILE [--format F] [--dtype D]
//                       [--keep-special-tokens]
//   moe-data info PATH [--format F] [--dtype D]
//
// Errors print "moe-data: error: ..." and exit 1; usage errors also print
// the usage and exit 2.
//
//===----------------------------------------------------------------------===//
#include "Args.h"
#include "Commands.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <functional>
#include <iostream>
#include <thread>

using namespace moe::tools;
using moe::rt::data::DatasetFormat;
using moe::rt::data::TokenDtype;

namespace {

/// As moe-run's --threads: more threads than this only cost memory (and
/// creating 10^8 of them fails).
constexpr int kMaxThreads = 1024;

constexpr const char *kUsage = R"(usage: moe-data <command> [options]

commands:
  synth --out PATH [--tokens N] [--seed S] [--format flat|megatron]
        [--dtype DTYPE]
      Write a synthetic English-like corpus of N byte-level tokens
      (vocabulary 256; N defaults to 200000, S to 0). Megatron output has
      one document per paragraph.
  tokenize --in FILES... --out PATH [--tokenizer TOK] [--format flat|megatron]
           [--dtype DTYPE] [--json-key K] [--append-eos] [--threads N]
           [--progress]
      Tokenize text files with TOK (an HF tokenizer.json with a BPE model,
      or a SentencePiece .model), giving the ids HF's encode(text) gives;
      without --tokenizer each byte is a token. Documents: each line of a
      .jsonl file (its string field K, default "text"); in other files each
      paragraph (text up to a blank line) for megatron output, the whole
      file for flat output. Each document is one megatron document.
      --append-eos puts the tokenizer's eos id after each document. N
      threads (1 to 1024, default: one per core) give the same output as
      one. Malformed UTF-8 is read as U+FFFD, with a warning per file.
      --progress shows progress on stderr (shown anyway on a terminal for
      inputs of 64 MiB or more).
  detokenize --tokenizer TOK IN --out FILE [--format auto|flat|megatron]
             [--dtype DTYPE] [--keep-special-tokens]
      Write the text of dataset IN, each document decoded as HF's
      decode(ids) does; special tokens are left out unless
      --keep-special-tokens. An id outside the vocabulary is an error.
  info PATH [--format auto|flat|megatron] [--dtype DTYPE]
      Print a dataset's format, dtype, token and document counts and id
      range. DTYPE is the dtype of a flat file.

PATH of a Megatron dataset is its prefix or its .bin; both prefix.bin and
prefix.idx are written. DTYPE is uint16 (default), uint32 (flat only),
uint8, int8, int16, int32 or int64. Formats default to flat (auto for info).
)";

int reportUsage(const std::string &message) {
  std::cerr << "moe-data: error: " << message << "\n\n" << kUsage;
  return 2;
}

absl::StatusOr<DatasetFormat>
formatOption(const Args &args, DatasetFormat fallback, bool allowAuto) {
  if (!args.has("--format"))
    return fallback;
  std::string name = args.get("--format", "");
  std::optional<DatasetFormat> format = moe::rt::data::parseDatasetFormat(name);
  if (!format || (*format == DatasetFormat::Auto && !allowAuto))
    return absl::InvalidArgumentError(
        absl::StrCat("--format must be ", allowAuto ? "auto, " : "",
                     "flat or megatron, got '", name, "'"));
  return *format;
}

absl::StatusOr<TokenDtype> dtypeOption(const Args &args) {
  std::string name = args.get("--dtype", "uint16");
  std::optional<TokenDtype> dtype = moe::rt::data::parseTokenDtype(name);
  if (!dtype)
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype must be uint8, int8, int16, uint16, int32, uint32 or int64, "
        "got '",
        name, "'"));
  return *dtype;
}

/// How a dataset is read: --format (auto by default) and --dtype.
absl::Status readOptions(const Args &args, DatasetFormat &format,
                         TokenDtype &dtype) {
  absl::StatusOr<DatasetFormat> parsedFormat =
      formatOption(args, DatasetFormat::Auto, /*allowAuto=*/true);
  if (!parsedFormat.ok())
    return parsedFormat.status();
  absl::StatusOr<TokenDtype> parsedDtype = dtypeOption(args);
  if (!parsedDtype.ok())
    return parsedDtype.status();
  format = *parsedFormat;
  dtype = *parsedDtype;
  return absl::OkStatus();
}

absl::StatusOr<OutputOptions> outputOptions(const Args &args) {
  OutputOptions output;
  if (!args.has("--out"))
    return absl::InvalidArgumentError("missing --out PATH");
  output.path = args.get("--out", "");
  if (output.path.empty())
    return absl::InvalidArgumentError("--out needs a non-empty path");
  absl::StatusOr<DatasetFormat> format =
      formatOption(args, DatasetFormat::Flat, /*allowAuto=*/false);
  if (!format.ok())
    return format.status();
  absl::StatusOr<TokenDtype> dtype = dtypeOption(args);
  if (!dtype.ok())
    return dtype.status();
  output.format = *format;
  output.dtype = *dtype;
  return output;
}

absl::Status noPositional(const Args &args) {
  if (!args.positional.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args.positional[0], "'"));
  return absl::OkStatus();
}

/// Parses the options of `command`; fills `run` with the command to run.
absl::Status parseCommand(const std::string &command,
                          const std::vector<std::string> &argv,
                          std::function<absl::Status()> &run) {
  if (command == "synth") {
    absl::StatusOr<Args> args =
        parseArgs(argv, {"--out", "--tokens", "--seed", "--format", "--dtype"});
    if (!args.ok())
      return args.status();
    if (absl::Status status = noPositional(*args); !status.ok())
      return status;
    SynthOptions options;
    absl::StatusOr<OutputOptions> output = outputOptions(*args);
    if (!output.ok())
      return output.status();
    options.output = *output;
    std::string tokens = args->get("--tokens", "200000");
    if (!absl::SimpleAtoi(tokens, &options.tokens) || options.tokens <= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokens must be a positive integer, got '", tokens, "'"));
    std::string seed = args->get("--seed", "0");
    if (!absl::SimpleAtoi(seed, &options.seed))
      return absl::InvalidArgumentError(absl::StrCat(
          "--seed must be a non-negative integer, got '", seed, "'"));
    run = [options] { return runSynth(options, std::cout); };
    return absl::OkStatus();
  }
  if (command == "tokenize") {
    absl::StatusOr<Args> args =
        parseArgs(argv,
                  {"--in", "--out", "--format", "--dtype", "--tokenizer",
                   "--json-key", "--threads", "--append-eos", "--progress"},
                  /*flags=*/{"--append-eos", "--progress"},
                  /*lists=*/{"--in"});
    if (!args.ok())
      return args.status();
    if (absl::Status status = noPositional(*args); !status.ok())
      return status;
    TokenizeOptions options;
    if (!args->lists.count("--in"))
      return absl::InvalidArgumentError("missing --in FILES...");
    options.inputs = args->lists.at("--in");
    absl::StatusOr<OutputOptions> output = outputOptions(*args);
    if (!output.ok())
      return output.status();
    options.output = *output;
    options.tokenizer = args->get("--tokenizer", "");
    if (args->has("--tokenizer") && options.tokenizer.empty())
      return absl::InvalidArgumentError("--tokenizer needs a non-empty path");
    options.jsonKey = args->get("--json-key", "text");
    options.appendEos = args->has("--append-eos");
    options.forceProgress = args->has("--progress");
    if (options.appendEos && options.tokenizer.empty())
      return absl::InvalidArgumentError(
          "--append-eos needs --tokenizer (byte tokens have no eos)");
    options.threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    options.threads = std::min(options.threads, kMaxThreads);
    if (args->has("--threads")) {
      std::string threads = args->get("--threads", "");
      if (!absl::SimpleAtoi(threads, &options.threads) ||
          options.threads <= 0 || options.threads > kMaxThreads)
        return absl::InvalidArgumentError(
            absl::StrCat("--threads must be in [1, ", kMaxThreads, "], got '",
                         threads, "'"));
    }
    run = [options] { return runTokenize(options, std::cout); };
    return absl::OkStatus();
  }
  if (command == "detokenize") {
    absl::StatusOr<Args> args = parseArgs(argv,
                                          {"--tokenizer", "--out", "--format",
                                           "--dtype", "--keep-special-tokens"},
                                          /*flags=*/{"--keep-special-tokens"});
    if (!args.ok())
      return args.status();
    if (args->positional.size() != 1)
      return absl::InvalidArgumentError(
          args->positional.empty() ? "detokenize needs a dataset IN"
                                   : "detokenize takes exactly one IN");
    DetokenizeOptions options;
    options.input = args->positional[0];
    if (!args->has("--tokenizer"))
      return absl::InvalidArgumentError("missing --tokenizer TOK");
    options.tokenizer = args->get("--tokenizer", "");
    if (!args->has("--out") || args->get("--out", "").empty())
      return absl::InvalidArgumentError("missing --out FILE");
    options.output = args->get("--out", "");
    if (absl::Status s = readOptions(*args, options.format, options.dtype);
        !s.ok())
      return s;
    options.keepSpecialTokens = args->has("--keep-special-tokens");
    run = [options] { return runDetokenize(options, std::cout); };
    return absl::OkStatus();
  }
  if (command == "info") {
    absl::StatusOr<Args> args = parseArgs(argv, {"--format", "--dtype"});
    if (!args.ok())
      return args.status();
    if (args->positional.size() != 1)
      return absl::InvalidArgumentError(args->positional.empty()
                                            ? "info needs a dataset PATH"
                                            : "info takes exactly one PATH");
    InfoOptions options;
    options.path = args->positional[0];
    if (absl::Status s = readOptions(*args, options.format, options.dtype);
        !s.ok())
      return s;
    run = [options] { return runInfo(options, std::cout); };
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown command '", command, "'"));
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return reportUsage("missing command");
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return 0;
  }
  for (const std::string &arg : args)
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
  std::function<absl::Status()> run;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (absl::Status status = parseCommand(args[0], rest, run); !status.ok())
    return reportUsage(std::string(status.message()));
  if (absl::Status status = run(); !status.ok()) {
    std::cerr << "moe-data: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
