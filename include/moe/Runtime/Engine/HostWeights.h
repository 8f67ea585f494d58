//===- HostWeights.h - host staging of a device rank's weights --*- C++ -*-===//
//
// A device backend keeps its buffers on the device; weights files,
// checkpoints and initialisation work on the host. HostWeights holds the
// host copy of one rank's parameters and optimizer state only (no inputs,
// no temporaries, no arena), the staging the backend moves to and from
// the device. initializeWeights is the rule every backend initialises by.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_HOSTWEIGHTS_H
#define MOE_RUNTIME_ENGINE_HOSTWEIGHTS_H

#include "moe/Runtime/Backend/WeightStore.h"
#include "moe/Runtime/Engine/Placement.h"

#include <memory>
#include <vector>

namespace moe::rt::engine {

class HostWeights final : public WeightStore {
public:
  /// Rank `rank`'s parameters and optimizer state of `program`, zeroed;
  /// with `held` (a pipeline rank's, heldBuffers), only those it holds.
  HostWeights(std::shared_ptr<const Program> program, int64_t rank,
              const std::vector<bool> *held = nullptr);

  const Program &program() const override { return *prog; }
  int64_t rank() const override { return placement.rank(); }
  const Placement &placementOf() const override { return placement; }
  const std::vector<uint32_t> &parameters() const override { return params; }
  const std::vector<uint32_t> &optimizerStates() const override {
    return states;
  }
  float *data(uint32_t buffer) override;
  const float *data(uint32_t buffer) const override;
  std::vector<int64_t> globalShape(uint32_t buffer) const override;

  /// Bytes of the staging (parameters and optimizer state).
  uint64_t bytes() const { return total; }

private:
  std::shared_ptr<const Program> prog;
  Placement placement;
  std::vector<uint32_t> params, states;
  /// By buffer index; empty for the buffers not staged.
  std::vector<std::vector<float>> values;
  uint64_t total = 0;
};

/// Sets every parameter of `weights` from its Init (Normal draws depend on
/// (seed, name, element index) only, see cpu::initNormal; a split buffer's
/// elements take the values they have in the whole tensor) and zeroes the
/// optimizer state.
void initializeWeights(WeightStore &weights, uint64_t seed);

/// The host bytes HostWeights takes for `program` (its persistent
/// parameters and optimizer state).
uint64_t hostWeightBytes(const Program &program);

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_HOSTWEIGHTS_H
