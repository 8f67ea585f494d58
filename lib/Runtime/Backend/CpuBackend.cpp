//===- CpuBackend.cpp - the steps on the host, by the engine's Executor ---===//
//
// The CPU backend is the Executor: its persistent storage is the host copy
// of the weights (weights() is the executor itself, so pushing and pulling
// them moves nothing), and its steps call the CPU kernels.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Backend/Backend.h"

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/strings/str_cat.h"

#include <cstring>

namespace moe::rt {

namespace {

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(std::unique_ptr<Executor> executor)
      : executor(std::move(executor)) {}

  std::string_view name() const override { return "cpu"; }
  const Program &program() const override { return executor->program(); }
  int64_t rank() const override { return executor->rank(); }
  BatchBlock batchBlock() const override { return executor->batchBlock(); }
  int64_t tokensPerStep() const override { return executor->tokensPerStep(); }
  int64_t microbatches() const override { return executor->microbatches(); }
  uint64_t totalParameterBytes() const override {
    return executor->totalParameterBytes();
  }
  uint64_t optimizerStateBytes() const override {
    return executor->optimizerStateBytes();
  }
  uint64_t arenaBytes() const override { return executor->arenaBytes(); }
  bool asyncCollectives() const override { return async; }

  absl::Status initialize(uint64_t seed) override {
    executor->initialize(seed);
    return absl::OkStatus();
  }
  WeightStore &weights() override { return *executor; }
  absl::Status pullWeights() override { return absl::OkStatus(); }
  absl::Status pushWeights() override { return absl::OkStatus(); }

  absl::StatusOr<std::unique_ptr<comm::Group>>
  createGroup(const AxisList &axes) const override {
    return executor->createGroup(axes);
  }
  absl::Status sumOverStages(absl::Span<double> values) override {
    return executor->sumOverStages(values);
  }
  absl::StatusOr<StepResult> runStep(const int32_t *tokens,
                                     const int32_t *targets, int64_t step,
                                     const StepHooks &hooks,
                                     const int32_t *positions) override {
    return executor->runStep(tokens, targets, step, hooks, positions);
  }
  bool evaluates() const override { return true; }
  absl::StatusOr<float> evaluate(const int32_t *tokens, const int32_t *targets,
                                 int64_t step,
                                 const int32_t *positions) override {
    return executor->evaluate(tokens, targets, step, positions);
  }
  const Executor *hostStep() const override { return executor.get(); }

  absl::Status readBuffer(uint32_t buffer, void *host) const override {
    absl::StatusOr<uint8_t *> bytes = storageOf(buffer);
    if (!bytes.ok())
      return bytes.status();
    std::memcpy(host, *bytes, program().buffers[buffer].sizeInBytes());
    return absl::OkStatus();
  }
  absl::Status writeBuffer(uint32_t buffer, const void *host) override {
    absl::StatusOr<uint8_t *> bytes = storageOf(buffer);
    if (!bytes.ok())
      return bytes.status();
    std::memcpy(*bytes, host, program().buffers[buffer].sizeInBytes());
    return absl::OkStatus();
  }
  absl::Status fillBuffer(uint32_t buffer, uint32_t pattern) override {
    absl::StatusOr<uint8_t *> bytes = storageOf(buffer);
    if (!bytes.ok())
      return bytes.status();
    fillPattern(*bytes, program().buffers[buffer].sizeInBytes(), pattern);
    return absl::OkStatus();
  }

  void configure(const BackendOptions &options) {
    executor->setExpertChunks(options.expertChunks);
    if (options.asyncCollectives)
      async = executor->setAsyncCollectives(true);
    executor->setTrace(options.trace);
  }

private:
  /// Where the executor keeps `buffer` (bf16 buffers hold their bits).
  absl::StatusOr<uint8_t *> storageOf(uint32_t buffer) const {
    if (absl::Status status = checkBufferIndex(name(), program(), buffer);
        !status.ok())
      return status;
    return executor->bytes(buffer);
  }

  std::unique_ptr<Executor> executor;
  bool async = false;
};

} // namespace

absl::StatusOr<std::unique_ptr<Backend>>
createCpuBackend(std::shared_ptr<const Program> program,
                 const BackendOptions &options) {
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(program), options.world);
  if (!executor.ok())
    return absl::Status(executor.status().code(),
                        absl::StrCat(options.artifactPath, ": ",
                                     executor.status().message()));
  auto backend = std::make_unique<CpuBackend>(std::move(*executor));
  backend->configure(options);
  return backend;
}

} // namespace moe::rt
