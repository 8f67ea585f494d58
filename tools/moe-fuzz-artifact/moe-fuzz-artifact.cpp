//===- moe-fuzz-artifact.cpp - damage artifacts and check the loader ------===//
//
//   moe-fuzz-artifact [--seed N] [--mutants N] [--steps N] ARTIFACT...
//
// For each artifact (written by moec) and each of N seeded mutations
// (Mutations.h: byte, offset and scalar damage, in turn):
//
//  1. Damaged: the mutation anywhere in the file, trailer included. The
//     loader must refuse the file unless its bytes are the original's
//     (byte-identical in effect); a damaged file that loads is a failure.
//  2. Resealed: the mutation inside the FlatBuffer, then a fresh checksum
//     trailer, as a writer with a bug or a hand edit would leave it. The
//     loader's verifier must refuse it or accept a program that the
//     executor then runs (one-rank artifacts: initialise and train
//     --steps steps) without crashing; the sanitizer build
//     (scripts/sanitize.sh) runs this to catch any read or write outside a
//     buffer.
//
// A watchdog ends the run with the mutant's description if one mutant takes
// longer than a minute: a loader or step that hangs is a failure too.
// Prints a summary per artifact; exit 0 if every check held, 1 if not, 2
// for bad usage.
//
//===----------------------------------------------------------------------===//
#include "Mutations.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Artifact/Seal.h"
#include "moe/Runtime/Engine/Executor.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace moe;
using namespace moe::rt;

static const char *kUsage = R"(usage: moe-fuzz-artifact [options] ARTIFACT...

Damages each artifact in seeded ways and checks that the loader refuses every
damaged file, and that resealed edits are refused or run safely.

  --seed N      first seed (default 1)
  --mutants N   mutations per artifact (default 300)
  --steps N     steps a resealed one-rank mutant that verifies is trained
                for (default 2)
)";

namespace {

struct Options {
  uint64_t seed = 1;
  int64_t mutants = 300;
  int64_t steps = 2;
  std::vector<std::string> artifacts;
};

bool parseOptions(int argc, char **argv, Options &options) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto number = [&](auto &out) {
      if (i + 1 >= argc || !absl::SimpleAtoi(argv[++i], &out)) {
        std::fprintf(stderr, "moe-fuzz-artifact: error: %s expects a number\n",
                     arg.c_str());
        return false;
      }
      return true;
    };
    if (arg == "--seed") {
      if (!number(options.seed))
        return false;
    } else if (arg == "--mutants") {
      if (!number(options.mutants) || options.mutants < 0)
        return false;
    } else if (arg == "--steps") {
      if (!number(options.steps) || options.steps < 0)
        return false;
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "moe-fuzz-artifact: error: unknown option '%s': expected "
                   "--seed, --mutants or --steps\n",
                   arg.c_str());
      return false;
    } else {
      options.artifacts.push_back(arg);
    }
  }
  if (options.artifacts.empty()) {
    std::fprintf(stderr, "moe-fuzz-artifact: error: no artifact given\n");
    return false;
  }
  return true;
}

/// Ends the process, naming the mutant, if one takes longer than a minute.
class Watchdog {
public:
  Watchdog() : thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void start(std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = std::move(what);
    deadline_ = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  }

private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::seconds(1));
      if (!what_.empty() && std::chrono::steady_clock::now() > deadline_) {
        std::fprintf(stderr, "moe-fuzz-artifact: error: %s: hung\n",
                     what_.c_str());
        std::fflush(nullptr);
        std::_Exit(1);
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

/// Resealed mutants that would allocate more than this are not run (a
/// damaged size can verify and ask for gigabytes).
constexpr uint64_t kMaxRunBytes = uint64_t(512) << 20;

/// What happened to the resealed mutants of one artifact.
struct ResealedCounts {
  int64_t refused = 0, ran = 0, failedStep = 0, tooLarge = 0, notRun = 0;
};

/// Runs a resealed mutant that verified as moe-run would, on token ids
/// below the original's vocabulary (the mutant's own may be damaged).
void runResealed(Program program, int64_t vocab, int64_t steps,
                 ResealedCounts &counts) {
  if (program.numRanks() != 1) {
    ++counts.notRun;
    return;
  }
  if (Executor::bytesPerRank(program) > kMaxRunBytes) {
    ++counts.tooLarge;
    return;
  }
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program));
  if (!executor.ok()) {
    ++counts.refused;
    return;
  }
  (*executor)->initialize();
  int64_t tokens = (*executor)->tokensPerStep();
  std::vector<int32_t> ids(tokens), targets(tokens);
  for (int64_t i = 0; i < tokens; ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
    targets[i] = static_cast<int32_t>((i * 7 + 10) % vocab);
  }
  for (int64_t step = 0; step < steps; ++step)
    if (!(*executor)->runStep(ids.data(), targets.data(), step).ok()) {
      ++counts.failedStep;
      return;
    }
  ++counts.ran;
}

/// Fuzzes one artifact; false if a check failed.
bool fuzzArtifact(const std::string &path, const Options &options,
                  Watchdog &watchdog) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> original((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  absl::StatusOr<Program> baseline =
      parseArtifact(original.data(), original.size(), path);
  if (!baseline.ok()) {
    std::fprintf(stderr, "moe-fuzz-artifact: error: %s does not load: %s\n",
                 path.c_str(), std::string(baseline.status().message()).c_str());
    return false;
  }
  int64_t vocab = std::max<int64_t>(baseline->model.vocab, 1);
  size_t content = original.size() - artifact::kSealSize;
  std::vector<uint8_t> flatbuffer(original.begin(), original.begin() + content);

  bool ok = true;
  int64_t refused = 0, identical = 0;
  ResealedCounts resealed;
  for (int64_t i = 0; i < options.mutants; ++i) {
    uint64_t seed = options.seed + static_cast<uint64_t>(i);
    auto kind = static_cast<fuzz::MutationKind>(i % 3);
    std::mt19937_64 rng(seed);
    fuzz::Mutant damaged =
        fuzz::mutate(original, original.size(), kind, rng);
    std::string what = absl::StrCat(path, ": mutant ", i, " (seed ", seed,
                                    ", ", damaged.description, ")");
    watchdog.start(what);
    absl::StatusOr<Program> read =
        parseArtifact(damaged.bytes.data(), damaged.bytes.size(), "mutant");
    if (damaged.bytes == original) {
      ++identical;
    } else if (read.ok()) {
      std::fprintf(stderr,
                   "moe-fuzz-artifact: error: %s: the damaged file loaded\n",
                   what.c_str());
      ok = false;
    } else {
      ++refused;
    }

    // The same kind of damage inside the FlatBuffer, sealed again.
    std::mt19937_64 rng2(seed);
    fuzz::Mutant edited = fuzz::mutate(flatbuffer, content, kind, rng2);
    std::array<uint8_t, artifact::kSealSize> seal =
        artifact::sealFor(edited.bytes.data(), edited.bytes.size());
    edited.bytes.insert(edited.bytes.end(), seal.begin(), seal.end());
    watchdog.start(absl::StrCat(path, ": resealed mutant ", i, " (seed ", seed,
                                ", ", edited.description, ")"));
    absl::StatusOr<Program> program =
        parseArtifact(edited.bytes.data(), edited.bytes.size(), "resealed");
    if (!program.ok())
      ++resealed.refused;
    else
      runResealed(std::move(*program), vocab, options.steps, resealed);
  }
  watchdog.start("");
  std::printf("%s: %lld mutants: damaged: %lld refused, %lld byte-identical, "
              "%lld accepted; resealed: %lld refused, %lld trained %lld "
              "steps, %lld stopped by a step's checks, %lld too large to "
              "run, %lld not run (several ranks)\n",
              path.c_str(), static_cast<long long>(options.mutants),
              static_cast<long long>(refused),
              static_cast<long long>(identical),
              static_cast<long long>(options.mutants - refused - identical),
              static_cast<long long>(resealed.refused),
              static_cast<long long>(resealed.ran),
              static_cast<long long>(options.steps),
              static_cast<long long>(resealed.failedStep),
              static_cast<long long>(resealed.tooLarge),
              static_cast<long long>(resealed.notRun));
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (!parseOptions(argc, argv, options)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  Watchdog watchdog;
  bool ok = true;
  for (const std::string &path : options.artifacts)
    ok = fuzzArtifact(path, options, watchdog) && ok;
  std::printf("moe-fuzz-artifact: %s\n", ok ? "every check held" : "FAILED");
  return ok ? 0 : 1;
}
