//===- Generate.h - moe-run generate: text from a trained model -*- C++ -*-===//
//
// Loads a one-rank artifact's weights (an HF checkpoint or a distributed
// one), feeds the prompt through engine::Decoder one token at a time, and
// samples new tokens: greedily, or with a temperature and top-k from a
// seeded generator, so a run repeats. The prompt's tokens are scored on the
// way (the teacher-forced loss of each given the ones before), and so are
// the generated ones under the distribution they were drawn from at
// temperature 1: the model's loss on its own output.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_GENERATE_H
#define MOE_RUNTIME_TRAIN_GENERATE_H

#include "moe/Runtime/Data/TokenDataset.h"

#include "absl/status/status.h"
#include "absl/types/span.h"

#include <cstdint>
#include <optional>
#include <random>
#include <ostream>
#include <string>
#include <vector>

namespace moe::rt::train {

struct GenerateOptions {
  std::string artifactPath;
  /// Weights: an HF checkpoint (--load) or a distributed checkpoint or a
  /// directory of them (--resume); exactly one.
  std::string loadPath, resumePath;
  /// The prompt: ids (--prompt-tokens), a token file (--prompt-data, read
  /// with dataOptions), or text (--prompt, with a tokenizer); exactly one.
  std::vector<int64_t> promptTokens;
  std::string promptDataPath;
  data::DatasetOptions dataOptions;
  std::optional<std::string> promptText;
  /// A tokenizer.json or SentencePiece .model (Text/Tokenizer.h): text in
  /// (--prompt) and out.
  std::string tokenizerPath;
  int64_t maxNew = 0;
  /// 0: greedy; otherwise the logits are divided by it before sampling.
  double temperature = 0;
  /// Sampling from the K most likely tokens only (0: all).
  int64_t topK = 0;
  uint64_t seed = 0;
  /// Prompt and generated ids as a flat token file of this dtype.
  std::string outPath;
  data::TokenDtype outDtype = data::TokenDtype::UInt16;
  std::optional<int> threads;
};

/// The next token after `logits`: the most likely (the lowest id among
/// equals) when `temperature` is 0, else a draw from softmax(logits /
/// temperature) over the `topK` most likely (all for 0).
int64_t sampleToken(absl::Span<const float> logits, double temperature,
                    int64_t topK, std::mt19937_64 &random);

/// Runs moe-run generate; prints to `out`. Errors name the file, the
/// option or the position concerned.
absl::Status generate(const GenerateOptions &options, std::ostream &out);

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_GENERATE_H
