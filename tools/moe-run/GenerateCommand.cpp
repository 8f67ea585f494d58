//===- GenerateCommand.cpp - moe-run generate: its command line -----------===//
#include "GenerateCommand.h"
#include "Flags.h"

#include "moe/Runtime/Train/Generate.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

#include <cmath>
#include <iostream>

using namespace moe::rt;
using namespace moe::tools;

namespace {

constexpr const char *kGenerateUsage =
    R"(usage: moe-run generate MODEL.moebin (--load PATH | --resume PATH)
           (--prompt-tokens IDS | --prompt-data FILE | --prompt TEXT)
           --max-new N [options]

Decodes from a trained model one token at a time with a KV cache, on the
CPU, with the artifact's own forward instructions (an fp32 artifact of one
rank: compile the model without --mesh and --precision to generate from
weights trained on any mesh).

  --load PATH            weights: an HF checkpoint (as --save writes; a
                         directory, its index's path or a .safetensors)
  --resume PATH          weights: a distributed checkpoint, or the newest
                         under PATH
  --prompt-tokens IDS    the prompt as token ids, separated by commas
  --prompt-data FILE     the prompt as a token file (flat or Megatron; see
                         --data-format and --data-dtype)
  --prompt TEXT          the prompt as text (needs --tokenizer)
  --tokenizer PATH       a tokenizer.json or SentencePiece .model: text in
                         and out
  --max-new N            tokens to generate (0: score the prompt only)
  --temperature T        0 (default): greedy; otherwise sample from
                         softmax(logits / T)
  --top-k K              sample from the K most likely tokens (default 0:
                         all)
  --seed S               the sampling generator's seed (default 0)
  --out FILE             write the prompt and the generated ids as a flat
                         token file
  --data-format F        --prompt-data's format: auto (default), flat or
                         megatron
  --data-dtype T         --prompt-data's (flat) and --out's token type
                         (default uint16)
  --threads N            GEMM threads

Prints the prompt's teacher-forced loss, the generated tokens' loss under
the model, the generated ids, and with --tokenizer the text. An --out that
is an input (or lies in --load's directory) is refused, as is an option
given twice.
)";

train::GenerateOptions parse(const std::vector<std::string> &args) {
  train::GenerateOptions options;
  bool haveMaxNew = false;
  int prompts = 0;
  OptionsSeen seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (absl::StartsWith(arg, "-"))
      seen.note(arg);
    // Only --prompt's free text may begin with "--".
    auto value = [&](bool freeText = false) -> const std::string & {
      if (i + 1 >= args.size())
        throw UsageError{arg + " needs a value"};
      if (!freeText)
        refuseOptionAsValue(arg, args[i + 1]);
      return args[++i];
    };
    if (arg.empty() || arg[0] != '-') {
      if (!options.artifactPath.empty())
        throw UsageError{"unexpected argument '" + arg + "'"};
      options.artifactPath = arg;
    } else if (arg == "--load") {
      options.loadPath = value();
    } else if (arg == "--resume") {
      options.resumePath = value();
    } else if (arg == "--prompt-tokens") {
      ++prompts;
      for (absl::string_view id : absl::StrSplit(value(), ','))
        options.promptTokens.push_back(
            parseInt("--prompt-tokens", std::string(id)));
    } else if (arg == "--prompt-data") {
      ++prompts;
      options.promptDataPath = value();
    } else if (arg == "--prompt") {
      ++prompts;
      options.promptText = value(/*freeText=*/true);
    } else if (arg == "--tokenizer") {
      options.tokenizerPath = value();
    } else if (arg == "--max-new") {
      options.maxNew = parseInt(arg, value());
      haveMaxNew = true;
      if (options.maxNew < 0)
        throw UsageError{"--max-new must be >= 0"};
    } else if (arg == "--temperature") {
      std::string text = value();
      options.temperature = parseNumber(arg, text);
      if (!(options.temperature >= 0) || std::isinf(options.temperature))
        throw UsageError{"--temperature must be a finite number >= 0, got '" +
                         text + "'"};
    } else if (arg == "--top-k") {
      options.topK = parseInt(arg, value());
      if (options.topK < 0)
        throw UsageError{"--top-k must be >= 0"};
    } else if (arg == "--seed") {
      options.seed = parseSeed(arg, value());
    } else if (arg == "--out") {
      options.outPath = value();
    } else if (arg == "--data-format") {
      options.dataOptions.format = parseDataFormat(value());
    } else if (arg == "--data-dtype") {
      options.dataOptions.flatDtype = parseDataDtype(value());
      options.outDtype = options.dataOptions.flatDtype;
    } else if (arg == "--threads") {
      options.threads = parseThreads(arg, value());
    } else {
      throw UsageError{"unknown option '" + arg + "'"};
    }
  }
  if (options.artifactPath.empty())
    throw UsageError{"generate needs the artifact"};
  if (options.loadPath.empty() == options.resumePath.empty())
    throw UsageError{
        "give the weights with exactly one of --load and --resume"};
  if (prompts != 1)
    throw UsageError{"give the prompt with exactly one of --prompt-tokens, "
                     "--prompt-data and --prompt"};
  if (!haveMaxNew)
    throw UsageError{"--max-new is required"};
  if (options.topK > 0 && options.temperature == 0)
    throw UsageError{"--top-k samples: it needs --temperature > 0"};
  std::vector<io::FlagPath> inputs = {
      {"the artifact", options.artifactPath},
      {"--load", options.loadPath},
      {"--resume", options.resumePath},
      {"--tokenizer", options.tokenizerPath}};
  addDataInputs(inputs, "--prompt-data", options.promptDataPath,
                options.dataOptions);
  checkOutputsAreNotInputs(inputs, {{{"--out", options.outPath}}});
  return options;
}

} // namespace

int runGenerateCommand(const std::vector<std::string> &args) {
  for (const std::string &arg : args)
    if (arg == "-h" || arg == "--help") {
      std::cout << kGenerateUsage;
      return 0;
    }
  train::GenerateOptions options;
  try {
    options = parse(args);
  } catch (const UsageError &error) {
    std::cerr << "moe-run: error: " << error.message << "\n\n"
              << kGenerateUsage;
    return 2;
  }
  if (absl::Status status = train::generate(options, std::cout); !status.ok()) {
    std::cerr << "moe-run: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
