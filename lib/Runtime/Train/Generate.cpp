//===- Generate.cpp - moe-run generate: text from a trained model ---------===//
#include "moe/Runtime/Train/Generate.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Data/TokenWriter.h"
#include "moe/Runtime/Engine/Decoder.h"
#include "moe/Runtime/Text/Tokenizer.h"
#include "moe/Runtime/Train/Checkpoint.h"
#include "moe/Runtime/Train/HfCheckpoint.h"
#include "moe/Runtime/Train/Trainer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>

namespace moe::rt::train {
namespace {

/// -log softmax(logits)[token], in double.
double tokenLoss(absl::Span<const float> logits, int64_t token) {
  double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float logit : logits)
    sum += std::exp(logit - top);
  return top + std::log(sum) - logits[token];
}

} // namespace

int64_t sampleToken(absl::Span<const float> logits, double temperature,
                    int64_t topK, std::mt19937_64 &random) {
  int64_t vocab = static_cast<int64_t>(logits.size());
  if (temperature <= 0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = topK > 0 ? std::min(topK, vocab) : vocab;
  // Ties keep the lower id first, so a draw does not depend on the sort.
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int64_t a, int64_t b) {
                      return logits[a] > logits[b] ||
                             (logits[a] == logits[b] && a < b);
                    });
  std::vector<double> weights(keep);
  double top = logits[order[0]];
  for (int64_t i = 0; i < keep; ++i)
    weights[i] = std::exp((logits[order[i]] - top) / temperature);
  std::discrete_distribution<int64_t> draw(weights.begin(), weights.end());
  return order[draw(random)];
}

namespace {

absl::StatusOr<std::vector<int64_t>>
promptOf(const GenerateOptions &options, const text::Tokenizer *tokenizer) {
  if (options.promptText) {
    if (!tokenizer)
      return absl::InvalidArgumentError("--prompt needs --tokenizer");
    return tokenizer->encode(*options.promptText);
  }
  if (!options.promptDataPath.empty()) {
    absl::StatusOr<data::TokenDataset> dataset =
        data::TokenDataset::open(options.promptDataPath, options.dataOptions);
    if (!dataset.ok())
      return dataset.status();
    std::vector<int64_t> ids(dataset->numTokens());
    for (int64_t i = 0; i < dataset->numTokens(); ++i)
      ids[i] = dataset->token(i);
    return ids;
  }
  return options.promptTokens;
}

/// A prompt of `promptTokens` tokens and --max-new fit in `room` positions
/// (the last generated token is not fed); counted so that no --max-new
/// overflows.
absl::Status checkPositions(int64_t promptTokens, int64_t maxNew,
                            int64_t room) {
  int64_t need = 0;
  bool overflows = __builtin_add_overflow(promptTokens - 1, maxNew, &need);
  if (!overflows && need <= room)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a prompt of ", promptTokens, " tokens and --max-new ", maxNew, " need ",
      overflows ? absl::StrCat("more than ",
                               std::numeric_limits<int64_t>::max())
                : std::to_string(need),
      " positions; the model was compiled for sequences of ", room));
}

} // namespace

absl::Status generate(const GenerateOptions &options, std::ostream &out) {
  if (absl::Status s = useKernelThreads(options.threads); !s.ok())
    return s;
  absl::StatusOr<Program> program = readArtifact(options.artifactPath);
  if (!program.ok())
    return program.status();
  if (absl::Status s = engine::Decoder::checkRanks(*program); !s.ok())
    return s;
  // Before any work: the prompt if it is known, else its first token.
  int64_t room = program->model.seq;
  if (!options.promptTokens.empty()) {
    if (absl::Status s = checkPositions(options.promptTokens.size(),
                                        options.maxNew, room);
        !s.ok())
      return s;
  } else if (options.maxNew > room) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new ", options.maxNew, " is more than the ", room,
                     " positions the model was compiled for"));
  }
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(*program));
  if (!executor.ok())
    return executor.status();
  if (!options.loadPath.empty()) {
    if (absl::Status s = loadHfCheckpoint(**executor, options.loadPath);
        !s.ok())
      return s;
  } else {
    absl::StatusOr<std::string> path = findCheckpoint(options.resumePath);
    if (!path.ok())
      return path.status();
    absl::StatusOr<CheckpointState> state = loadCheckpoint(**executor, *path);
    if (!state.ok())
      return state.status();
  }
  absl::StatusOr<std::unique_ptr<engine::Decoder>> decoder =
      engine::Decoder::create(**executor);
  if (!decoder.ok())
    return decoder.status();

  std::unique_ptr<text::Tokenizer> tokenizer;
  if (!options.tokenizerPath.empty()) {
    absl::StatusOr<std::unique_ptr<text::Tokenizer>> loaded =
        text::Tokenizer::load(options.tokenizerPath);
    if (!loaded.ok())
      return loaded.status();
    tokenizer = std::move(*loaded);
    // What the tokenizer file says that HF reads otherwise (an added
    // token's id): on stderr, so the generated text on `out` stays clean.
    for (const std::string &warning : tokenizer->warnings())
      std::cerr << "moe-run: warning: " << warning << "\n";
    if (tokenizer->vocabSize() > (*decoder)->vocab())
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokenizer ", options.tokenizerPath, " has ",
          tokenizer->vocabSize(), " tokens, the model's vocabulary ",
          (*decoder)->vocab()));
  }
  absl::StatusOr<std::vector<int64_t>> prompt =
      promptOf(options, tokenizer.get());
  if (!prompt.ok())
    return prompt.status();
  if (prompt->empty())
    return absl::InvalidArgumentError(
        options.promptText ? "--prompt: the text encodes to no tokens"
                           : absl::StrCat("--prompt-data '",
                                          options.promptDataPath,
                                          "' holds no tokens"));
  for (size_t i = 0; i < prompt->size(); ++i)
    if ((*prompt)[i] < 0 || (*prompt)[i] >= (*decoder)->vocab())
      return absl::InvalidArgumentError(absl::StrCat(
          "generate: prompt token ", (*prompt)[i], " at position ", i,
          " is outside the vocabulary [0, ", (*decoder)->vocab(), ")"));
  if (absl::Status s = checkPositions(prompt->size(), options.maxNew,
                                      (*decoder)->maxPositions());
      !s.ok())
    return s;

  // The prompt, scored token by token as the training loss scores it.
  std::vector<int64_t> ids;
  double promptLoss = 0;
  absl::Span<const float> logits;
  // The next position's logits after `token`.
  auto feed = [&](int64_t token) -> absl::Status {
    absl::StatusOr<absl::Span<const float>> next =
        (*decoder)->feed(static_cast<int32_t>(token));
    if (!next.ok())
      return next.status();
    logits = *next;
    return absl::OkStatus();
  };
  for (int64_t token : *prompt) {
    if (!ids.empty())
      promptLoss += tokenLoss(logits, token);
    ids.push_back(token);
    // The last token of the sequence is scored, not fed.
    if (ids.size() == prompt->size() && options.maxNew == 0)
      break;
    if (absl::Status s = feed(token); !s.ok())
      return s;
  }
  if (ids.size() > 1)
    out << absl::StrFormat("prompt: %d tokens, teacher-forced loss %.7g "
                           "(mean over %d predictions)\n",
                           ids.size(), promptLoss / (ids.size() - 1),
                           ids.size() - 1);

  std::mt19937_64 random(options.seed);
  double generatedLoss = 0;
  for (int64_t n = 0; n < options.maxNew; ++n) {
    int64_t token =
        sampleToken(logits, options.temperature, options.topK, random);
    generatedLoss += tokenLoss(logits, token);
    ids.push_back(token);
    if (n + 1 < options.maxNew)
      if (absl::Status s = feed(token); !s.ok())
        return s;
  }
  std::vector<int64_t> generated(ids.end() - options.maxNew, ids.end());
  if (options.maxNew > 0)
    out << absl::StrFormat("generated: %d tokens, their loss under the model "
                           "%.7g (%s)\n",
                           options.maxNew, generatedLoss / options.maxNew,
                           options.temperature > 0
                               ? absl::StrFormat("temperature %g, top-k %d, "
                                                 "seed %d",
                                                 options.temperature,
                                                 options.topK, options.seed)
                               : std::string("greedy"));
  out << "ids: " << absl::StrJoin(generated, " ") << "\n";
  if (tokenizer) {
    absl::StatusOr<std::string> text = tokenizer->decode(ids);
    if (!text.ok())
      return text.status();
    out << "text: " << *text << "\n";
  }
  if (!options.outPath.empty())
    return data::writeFlatTokens(options.outPath, ids, options.outDtype);
  return absl::OkStatus();
}

} // namespace moe::rt::train
