//===- Tokenize.cpp - moe-data tokenize: text files to token datasets -----===//
//
// Without a tokenizer each byte is a token. With one, the documents are
// spread over worker threads, each taking the next untaken document, and
// written in input order, so the output is the same for any thread count.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Documents.h"
#include "moe/Runtime/IO/SamePath.h"

#include "moe/Runtime/Text/Tokenizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>
#include <unistd.h>

namespace moe::tools {

namespace {

/// Inputs from this size on show progress on a terminal by themselves.
constexpr int64_t kProgressBytes = 64 << 20;

void printProgress(int64_t done, int64_t total, bool last) {
  int percent = total > 0 ? static_cast<int>(100 * done / total) : 100;
  constexpr int kWidth = 30;
  int filled = percent * kWidth / 100;
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::cerr << absl::StrFormat("\rtokenize [%s] %3d%% %.1f/%.1f MB", bar,
                               percent, done / 1e6, total / 1e6)
            << (last ? "\n" : "") << std::flush;
}

/// The files --out writes: the path, or a Megatron prefix's .bin and .idx.
std::vector<rt::io::OutputPath> outputFiles(const OutputOptions &output) {
  if (output.format != rt::data::DatasetFormat::Megatron)
    return {{{"--out", output.path}}};
  rt::data::MegatronPaths paths = rt::data::megatronPathsFor(output.path);
  return {{{"--out", paths.bin}}, {{"--out", paths.idx}}};
}

} // namespace

absl::Status runTokenize(const TokenizeOptions &options, std::ostream &out) {
  std::vector<rt::io::FlagPath> inputs;
  for (const std::string &input : options.inputs)
    inputs.push_back({"--in", input});
  if (!options.tokenizer.empty())
    inputs.push_back({"--tokenizer", options.tokenizer});
  if (absl::Status status =
          rt::io::checkOutputsAreNotInputs(inputs, outputFiles(options.output));
      !status.ok())
    return status;
  // Byte tokens are the file's bytes, valid UTF-8 or not; a tokenizer
  // reads text.
  std::vector<std::string> utf8Warnings;
  absl::StatusOr<std::vector<std::string>> documents = readDocuments(
      options.inputs, options.output.format, options.jsonKey,
      options.tokenizer.empty() ? nullptr : &utf8Warnings);
  if (!documents.ok())
    return documents.status();
  if (options.tokenizer.empty())
    return writeByteCorpus(*documents, options.output, out);
  for (const std::string &warning : utf8Warnings)
    std::cerr << "moe-data: warning: " << warning << "\n";

  absl::StatusOr<std::unique_ptr<rt::text::Tokenizer>> tokenizer =
      rt::text::Tokenizer::load(options.tokenizer);
  if (!tokenizer.ok())
    return tokenizer.status();
  const rt::text::Tokenizer &tok = **tokenizer;
  for (const std::string &warning : tok.warnings())
    std::cerr << "moe-data: warning: " << warning << "\n";
  rt::data::TokenDtype dtype = options.output.dtype;
  if (tok.vocabSize() - 1 > rt::data::tokenDtypeMax(dtype))
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", tok.path(), "' has ", tok.vocabSize(),
                     " token ids, more than --dtype ",
                     rt::data::tokenDtypeName(dtype), " holds (ids up to ",
                     rt::data::tokenDtypeMax(dtype), "); use a wider --dtype"));
  std::optional<int64_t> eos = tok.eosId();
  if (options.appendEos && !eos)
    return absl::InvalidArgumentError(absl::StrCat(
        "--append-eos: tokenizer '", tok.path(), "' has no eos token"));

  int64_t totalBytes = 0;
  for (const std::string &document : *documents)
    totalBytes += static_cast<int64_t>(document.size());
  bool progress = options.forceProgress ||
                  (isatty(STDERR_FILENO) && totalBytes >= kProgressBytes);

  size_t count = documents->size();
  std::vector<std::vector<int64_t>> ids(count);
  std::vector<absl::Status> errors(count);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> bytesDone{0}, dropped{0};
  // No more threads than documents.
  int threads = static_cast<int>(
      std::min<size_t>(static_cast<size_t>(options.threads),
                       std::max<size_t>(count, 1)));
  std::atomic<int> running{threads};
  auto work = [&] {
    for (size_t d = next++; d < count; d = next++) {
      int64_t droppedHere = 0;
      absl::StatusOr<std::vector<int64_t>> encoded =
          tok.encode((*documents)[d], /*addSpecialTokens=*/true, &droppedHere);
      dropped += droppedHere;
      if (encoded.ok()) {
        ids[d] = std::move(*encoded);
        if (options.appendEos)
          ids[d].push_back(*eos);
      } else {
        errors[d] = encoded.status();
      }
      bytesDone += static_cast<int64_t>((*documents)[d].size());
    }
    --running;
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back(work);
  while (progress && running > 0) {
    printProgress(bytesDone, totalBytes, /*last=*/false);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (std::thread &worker : workers)
    worker.join();
  if (progress)
    printProgress(bytesDone, totalBytes, /*last=*/true);
  for (size_t d = 0; d < count; ++d)
    if (!errors[d].ok())
      return absl::InvalidArgumentError(
          absl::StrCat("document ", d, ": ", errors[d].message()));
  if (dropped > 0)
    std::cerr << "moe-data: warning: " << dropped.load()
              << " character(s) had no token in tokenizer '" << tok.path()
              << "' (no unk_token, no byte fallback) and were left out of the "
                 "ids, as HF's tokenizers does\n";
  return writeTokenDocuments(ids, options.output, out);
}

} // namespace moe::tools
