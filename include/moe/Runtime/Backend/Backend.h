//===- Backend.h - where a training step runs -------------------*- C++ -*-===//
//
// The trainer owns one Backend, chosen by name ("cpu", "cuda") through
// createBackend. A backend owns one rank's buffers and everything about
// them: their allocation and initialisation, the host copy of the weights
// that weights files and checkpoints read and write (weights(), moved to
// and from the backend's own memory by pushWeights/pullWeights), the
// groups a step communicates over, and the step itself. The trainer knows
// no backend but through this interface.
//
// The CPU backend is built in. A device backend is a separately built
// shared module (the CUDA one: lib/libmoe_backend_cuda.so next to the
// executable's bin/), loaded only when asked for, so that moe-run neither
// links nor needs the device's libraries otherwise. A module exports one C
// entry point (BackendModule.h) that returns its factory.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_BACKEND_BACKEND_H
#define MOE_RUNTIME_BACKEND_BACKEND_H

#include "moe/Runtime/Backend/WeightStore.h"
#include "moe/Runtime/Engine/Executor.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::rt {

/// What a backend is created with, besides the program.
struct BackendOptions {
  /// The artifact's path, which errors about the program begin with.
  std::string artifactPath;
  /// The job's processes, for a program over several ranks (the backend
  /// checks its size); none for one rank.
  comm::World *world = nullptr;
  /// Chunks of every expert-parallel exchange (Executor::setExpertChunks).
  int64_t expertChunks = 1;
  /// Gradient reductions and all-gathers on a communication thread, where
  /// the backend can (asyncCollectives() says whether it is on).
  bool asyncCollectives = false;
  /// Records the steps' kernels and communication; must outlive the
  /// backend's steps.
  io::Trace *trace = nullptr;
  /// --profile: a backend whose steps run asynchronously (a device) times
  /// its instructions itself (instructionTimes()).
  bool profile = false;
  /// --virtual-gpu NAME with --device cuda: the CUDA backend runs on the
  /// virtual GPU emulating NAME (a100, h100, h200; lib/Runtime/VirtualGpu),
  /// loaded from its own module. Empty: a real GPU.
  std::string virtualGpu;
};

/// Seconds and calls per opcode (indexed by Opcode), over the steps run.
using OpcodeTimes = std::vector<std::pair<double, int64_t>>;

class Backend {
public:
  virtual ~Backend() = default;

  /// The name it was created by ("cpu", "cuda").
  virtual std::string_view name() const = 0;
  virtual const Program &program() const = 0;

  /// This rank in the program's mesh, and the rows of the global batch it
  /// trains on.
  virtual int64_t rank() const = 0;
  int64_t numRanks() const { return program().numRanks(); }
  virtual BatchBlock batchBlock() const = 0;
  /// The length of runStep's tokens and targets, and the microbatches a
  /// step accumulates over (1 for a plain program).
  virtual int64_t tokensPerStep() const = 0;
  virtual int64_t microbatches() const = 0;

  /// Bytes of this rank's parameters, optimizer state and temporary arena
  /// (in the backend's memory).
  virtual uint64_t totalParameterBytes() const = 0;
  virtual uint64_t optimizerStateBytes() const = 0;
  virtual uint64_t arenaBytes() const = 0;
  /// One line saying where the steps run ("device: ..."), or "" for the
  /// host.
  virtual std::string placementLine() const { return ""; }
  /// Whether gradient reductions run on a communication thread.
  virtual bool asyncCollectives() const { return false; }
  /// A device's memory, for the run's report: what the backend allocated
  /// (weights, optimizer state, arena, library workspaces) and the peak of
  /// the scratch its instructions took besides, which the compiled memory
  /// plan counts as the kernel workspace. None for the host backend, whose
  /// memory is the process's.
  struct DeviceMemory {
    uint64_t allocated = 0, scratchPeak = 0;
  };
  virtual std::optional<DeviceMemory> deviceMemory() const {
    return std::nullopt;
  }

  /// Sets every parameter from its Init with `seed` and zeroes the
  /// optimizer state (engine::initializeWeights), in the backend's memory.
  virtual absl::Status initialize(uint64_t seed) = 0;
  /// The host copy of this rank's weights. Current after pullWeights();
  /// what is written there reaches the steps after pushWeights(). (The CPU
  /// backend steps on it directly: both are no-ops.)
  virtual WeightStore &weights() = 0;
  virtual absl::Status pullWeights() = 0;
  virtual absl::Status pushWeights() = 0;

  /// A new group over `axes` of the program's mesh (all of them: the whole
  /// job). A collective call of every rank.
  virtual absl::StatusOr<std::unique_ptr<comm::Group>>
  createGroup(const AxisList &axes) const = 0;
  /// Replaces each of `values` by its sum over the pipeline stages; nothing
  /// to do without stages (Executor::sumOverStages).
  virtual absl::Status sumOverStages(absl::Span<double> values) = 0;

  /// Runs one step at 0-based `step` (Executor::runStep): errors name the
  /// step; a non-finite loss or gradient norm stops it before the
  /// optimizer. Every backend calls `hooks` before and after each
  /// instruction (an unset hook costs one test of it); a hook may inspect
  /// and change buffers through readBuffer, writeBuffer and fillBuffer.
  /// A program with document masking also reads `positions` (as many ids:
  /// each token's position in its document).
  virtual absl::StatusOr<StepResult>
  runStep(const int32_t *tokens, const int32_t *targets, int64_t step,
          const StepHooks &hooks, const int32_t *positions = nullptr) = 0;
  /// The loss of one batch without changing anything (moe-run
  /// --eval-data): the step's instructions that the loss depends on
  /// (Executor::evaluate). Inputs as runStep's. Whether the backend can is
  /// evaluates(); one that cannot is refused before the run starts.
  virtual bool evaluates() const { return false; }
  virtual absl::StatusOr<float> evaluate(const int32_t *tokens,
                                         const int32_t *targets, int64_t step,
                                         const int32_t *positions = nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "the ", std::string(name()), " backend does not run evaluations"));
  }
  /// The host executor whose buffers step hooks may read in place while it
  /// runs (step dumps, per-kernel profiles, the loss parts): the CPU
  /// backend's; null for a device backend, whose buffers the host reaches
  /// only through readBuffer and its peers.
  virtual const Executor *hostStep() const { return nullptr; }
  /// Whether its steps record into BackendOptions::trace (moe-run
  /// --trace): a host step's kernels as they run, a device's from events.
  virtual bool tracesSteps() const { return hostStep() != nullptr; }
  /// With BackendOptions::profile, the time of each opcode's instructions
  /// as the backend measured it (a device: on its compute stream, from an
  /// instruction's first kernel to its last); null where the caller times
  /// them around the hooks itself (a host step, which runs synchronously).
  virtual const OpcodeTimes *instructionTimes() const { return nullptr; }

  /// For tests and tools (the conformance suite), between steps or from a
  /// step's hooks: buffer `buffer`'s Buffer::sizeInBytes() bytes copied to
  /// `host`, or from `host`, or set to repeats of the four bytes of
  /// `pattern` (a poison; a last partial word takes its leading bytes). A
  /// device backend waits for its step's stream first; a collective that
  /// it defers to a communication stream has its result only where the
  /// step waits for it. A temporary holds what the last instruction
  /// writing it left (the arena is shared: see Program.arenaBytes). Errors
  /// name the buffer (an index out of range, a dtype without storage).
  virtual absl::Status readBuffer(uint32_t buffer, void *host) const = 0;
  virtual absl::Status writeBuffer(uint32_t buffer, const void *host) = 0;
  virtual absl::Status fillBuffer(uint32_t buffer, uint32_t pattern) = 0;
};

/// What readBuffer, writeBuffer and fillBuffer check first: `buffer` is
/// one of the program's (an error naming the backend and the index).
absl::Status checkBufferIndex(std::string_view backend, const Program &program,
                              uint32_t buffer);

/// `size` bytes at `bytes` set to repeats of `pattern`'s four bytes (as
/// fillBuffer defines it).
void fillPattern(void *bytes, uint64_t size, uint32_t pattern);

/// Creates one rank's backend for a program.
using BackendFactory = absl::StatusOr<std::unique_ptr<Backend>> (*)(
    std::shared_ptr<const Program> program, const BackendOptions &options);

/// The names createBackend knows, in the order to list them.
const std::vector<std::string> &backendNames();

/// The backend called `name`, loading its module first if it is not built
/// in. Errors name the backend (`--device NAME: ...`) and, for a module,
/// its path and why it did not load.
absl::StatusOr<std::unique_ptr<Backend>>
createBackend(std::string_view name, std::shared_ptr<const Program> program,
              const BackendOptions &options);

/// The host memory backend `name` needs for one rank of a verified
/// `program` (the CPU's: all of it, Executor::bytesPerRank; a device
/// backend's: its host staging of the weights).
uint64_t hostBytesPerRank(std::string_view name, const Program &program);

/// The CPU backend, over the engine's Executor.
absl::StatusOr<std::unique_ptr<Backend>>
createCpuBackend(std::shared_ptr<const Program> program,
                 const BackendOptions &options);

} // namespace moe::rt

#endif // MOE_RUNTIME_BACKEND_BACKEND_H
